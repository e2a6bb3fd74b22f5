#!/usr/bin/env bash
# mlcroissant (PyPI), for the release test that validates `croissant.json` and loads every
# record set of it (tests/it/release.rs): a venv of its own under the setup cache, proved by
# validating and loading a one-record Croissant 1.1 file offline, not just found.
# Idempotent: a venv whose version answers is left alone.
# needed by: make test
# (the tests only: `scripts/setup.sh demo` skips it)
set -euo pipefail
cache="${BENCHGEN_CACHE:-$HOME/.cache/benchgen}"
venv="$cache/mlcroissant"
VERSION=1.1.1

prove() {
  local dir out
  dir=$(mktemp -d)
  printf '{"query": "benchgen-setup"}\n' >"$dir/part.jsonl"
  "$venv/bin/python" - "$dir" <<'PY' || { rm -rf "$dir"; return 1; }
import hashlib, json, os, sys
d = sys.argv[1]
sha = hashlib.sha256(open(os.path.join(d, "part.jsonl"), "rb").read()).hexdigest()
# The standard Croissant 1.1 context (as src/release/croissant.rs writes it).
ctx = {"@language": "en", "@vocab": "https://schema.org/", "arrayShape": "cr:arrayShape", "citeAs": "cr:citeAs",
       "column": "cr:column", "conformsTo": "dct:conformsTo", "containedIn": "cr:containedIn",
       "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
       "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
       "dct": "http://purl.org/dc/terms/", "description": {"@container": "@language"},
       "equivalentProperty": "cr:equivalentProperty", "examples": {"@id": "cr:examples", "@type": "@json"},
       "extract": "cr:extract", "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject",
       "fileSet": "cr:fileSet", "format": "cr:format", "includes": "cr:includes", "isArray": "cr:isArray",
       "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key", "md5": "cr:md5",
       "name": {"@container": "@language"}, "parentField": "cr:parentField", "path": "cr:path",
       "recordSet": "cr:recordSet", "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated",
       "replace": "cr:replace", "samplingRate": "cr:samplingRate", "sc": "https://schema.org/",
       "separator": "cr:separator", "source": "cr:source", "subField": "cr:subField", "transform": "cr:transform"}
doc = {"@context": ctx, "@type": "sc:Dataset", "conformsTo": "http://mlcommons.org/croissant/1.1",
       "name": "setup", "description": "benchgen setup check", "license": "cc0-1.0",
       "url": "https://example.org/setup", "version": "1.0.0", "citeAs": "setup",
       "distribution": [{"@type": "cr:FileObject", "@id": "part.jsonl", "name": "part.jsonl",
                         "contentUrl": "part.jsonl", "encodingFormat": "application/jsonlines", "sha256": sha}],
       "recordSet": [{"@type": "cr:RecordSet", "@id": "part", "name": "part", "field": [
           {"@type": "cr:Field", "@id": "part/query", "name": "query", "dataType": "sc:Text",
            "source": {"fileObject": {"@id": "part.jsonl"}, "extract": {"column": "query"}}}]}]}
json.dump(doc, open(os.path.join(d, "croissant.json"), "w"))
PY
  out=$("$venv/bin/mlcroissant" validate --jsonld "$dir/croissant.json" 2>&1) || { rm -rf "$dir"; echo "$out" | tail -5 >&2; return 1; }
  out=$("$venv/bin/python" -c '
import sys, importlib.metadata, mlcroissant as mlc
rows = list(mlc.Dataset(jsonld=sys.argv[1]).records(record_set="part"))
assert rows == [{"part/query": b"benchgen-setup"}], rows
print(importlib.metadata.version("mlcroissant"))' "$dir/croissant.json" 2>&1) || { rm -rf "$dir"; echo "$out" | tail -5 >&2; return 1; }
  rm -rf "$dir"
  [ "$(echo "$out" | tail -1)" = "$VERSION" ] || { echo "  mlcroissant: got version $(echo "$out" | tail -1), want $VERSION" >&2; return 1; }
  echo "  mlcroissant $VERSION: validates and loads a Croissant file ($venv)"
}

if [ -x "$venv/bin/python" ] && prove 2>/dev/null; then
  exit 0
fi
echo "  installing from PyPI into $venv: mlcroissant==$VERSION"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mlcroissant==$VERSION"
prove

"""benchgen's Inspect AI task: this release, run by any model Inspect supports.

    inspect eval inspect/benchgen_task.py --model openai/gpt-4o-mini
    inspect eval inspect/benchgen_task.py --model openai/<model> -M responses_api=false
        (an OpenAI-compatible endpoint: OPENAI_BASE_URL=http://…/v1 and OPENAI_API_KEY)

Written into every release by `benchgen release` (as `inspect/benchgen_task.py`, next to
`inspect/tools.json`); it needs `inspect-ai` and the standard library, not benchgen.

- Dataset: `samples.jsonl`, one Inspect sample per released sample (its id).
- Tools: each sample's *oracle* tool space, as `benchgen eval` gives it by default: every
  alternative of every reference call and the members of their EFS sets
  (`tool_equivalence_sets.json`); a sample without reference calls (L5) gets every released
  tool of its track. Schemas and the answers' seed come from `inspect/tools.json`; function
  names are the tool ids with `::` as `__` (as `benchgen eval` names them).
- Answers: a call whose tool and arguments (compared with object keys sorted) match a
  recording of the sample in `cassettes.jsonl` gets the recorded result; any other valid
  call gets the generic value `benchgen eval`'s sandbox generates for it (the same bytes,
  from the release's seed, the tool and the arguments); arguments that do not fit the
  tool's input schema get a tool error naming each field.
- Agent: per user turn, the gold conversation of the earlier turns, then the model calls
  tools until it answers, at most `max_calls` calls per turn but never fewer than the
  sample's largest turn makes in its reference (the defaults of benchgen's
  `[execute]`; `-T max_calls=…`, `-T system_prompt=…`, `-T answer_nudge=…`,
  `-T call_nudge=…`, `-T tool_result_chars=…`). A reply asking again only for calls the turn
  already ran (same function and arguments) runs none: the answer nudge asks once, then the
  turn ends (`repeated`). A reply with neither calls nor words (markup such as
  `<tools></tools>` aside) gets a nudge: the call nudge before any call, the answer nudge
  after; each once per turn.
- Scorer `benchgen`: the per-sample figures of `benchgen score` (corrected mode) on the
  calls the model made: exact match, precision, recall, F1 (score metadata: the whole
  per-sample record and the prediction in `benchgen score`'s unified format).

Predictions for `benchgen score`, from an Inspect log:

    python inspect/benchgen_task.py predictions LOG > predictions.jsonl
    benchgen score --bench samples.jsonl --pred predictions.jsonl
"""

import hashlib
import json
import math
import re
import struct
import sys
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.log import read_eval_log
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    get_model,
)
from inspect_ai.scorer import Score, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import ToolCall, ToolInfo, ToolParams
from inspect_ai.util import JSONSchema

RELEASE = Path(__file__).resolve().parent.parent

SYSTEM_PROMPT = (
    "You are an assistant with tools. Work through the user's request step by step: call the tool for "
    "the first step; when its result arrives, use the values in it (ids, names) to call the tool for the "
    "next step. Tools that do not depend on each other may be called in the same turn. Take no action "
    "the user did not ask for. Never make up a value (an id, a name, an e-mail address): use only what "
    "the request and the tool results give. Answer only when every step of the request is done. If none "
    "of your tools can do what the user asks, say so and call none."
)
ANSWER_NUDGE = "Now answer the user in plain words, from the tool results above."
CALL_NUDGE = "Reply with a tool call for the first step of the user's request, or answer in plain words."
_MARKUP = re.compile(r"</?[A-Za-z_][A-Za-z0-9_]*>|```[A-Za-z]*")
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S)


def _wordless(text):
    """No words once reasoning, markup tags and code fences are taken out (benchgen's
    `wordless`, on a reply whose `<think>` block benchgen's client already took out)."""
    return not _MARKUP.sub("", _THINK.sub("", text or "")).strip()


# --- JSON as benchgen writes and compares it (serde_json) ----------------------------------


def _number(v):
    """An integer the way serde_json reads it: past u64 or below i64, a float."""
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
        return float(v)
    return v


def normal(v):
    """A parsed JSON value with serde_json's number types."""
    if isinstance(v, dict):
        return {k: normal(x) for k, x in v.items()}
    if isinstance(v, list):
        return [normal(x) for x in v]
    return _number(v)


def canonical(v):
    """Object keys sorted at every level."""
    if isinstance(v, dict):
        return {k: canonical(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [canonical(x) for x in v]
    return v


def _float(x):
    """A float as serde_json writes it: shortest digits, fixed point for exponents -5..=15."""
    if math.isnan(x) or math.isinf(x):
        return "null"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    mantissa, _, exp = repr(abs(x)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    last = (int(exp) if exp else 0) - len(frac)  # the exponent of the last digit
    kept = digits.rstrip("0")
    last += len(digits) - len(kept)
    n = len(kept)
    e = last + n - 1  # the exponent of the first digit
    if -5 <= e <= 15:
        if e >= n - 1:
            s = kept + "0" * (e - n + 1) + ".0"
        elif e >= 0:
            s = kept[: e + 1] + "." + kept[e + 1 :]
        else:
            s = "0." + "0" * (-e - 1) + kept
    else:
        s = kept[0] + ("." + kept[1:] if n > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return ("-" if x < 0 else "") + s


def dumps(v):
    """Compact JSON, byte for byte as serde_json writes it."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dumps(x) for k, x in v.items()) + "}"


def json_equal(a, b):
    """JSON equality with numbers compared by value and booleans apart from numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# --- The sandbox's generated answer (ChaCha8 and rand 0.9, as `benchgen eval` draws it) ---

_M32 = 0xFFFFFFFF


_WORDS = (
    "alpha amber atlas beacon cedar cobalt delta ember falcon garnet harbor indigo juniper kestrel lumen "
    "maple nimbus onyx orbit prairie quartz raven sierra tundra umber vertex willow zenith"
).split()


def _quarter(x, a, b, c, d):
    x[a] = (x[a] + x[b]) & _M32
    x[d] ^= x[a]
    x[d] = ((x[d] << 16) | (x[d] >> 16)) & _M32
    x[c] = (x[c] + x[d]) & _M32
    x[b] ^= x[c]
    x[b] = ((x[b] << 12) | (x[b] >> 20)) & _M32
    x[a] = (x[a] + x[b]) & _M32
    x[d] ^= x[a]
    x[d] = ((x[d] << 8) | (x[d] >> 24)) & _M32
    x[c] = (x[c] + x[d]) & _M32
    x[b] ^= x[c]
    x[b] = ((x[b] << 7) | (x[b] >> 25)) & _M32


class ChaCha8:
    """rand_chacha's ChaCha8Rng from a 32-byte seed: the keystream as 32-bit words."""

    def __init__(self, seed):
        self.key = list(struct.unpack("<8I", seed))
        self.block = 0
        self.words = []

    def u32(self):
        if not self.words:
            s = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *self.key, self.block & _M32, self.block >> 32, 0, 0]
            x = list(s)
            for _ in range(4):
                for a, b, c, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)):
                    _quarter(x, a, b, c, d)
                for a, b, c, d in ((0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
                    _quarter(x, a, b, c, d)
            self.block += 1
            self.words = [(x[i] + s[i]) & _M32 for i in range(16)][::-1]
        return self.words.pop()

    def below(self, n):
        """rand 0.9's `random_range(0..n)` for a small range (32-bit Canon's method)."""
        product = self.u32() * n
        result, low = product >> 32, product & _M32
        if low > (-n & _M32) and low + ((self.u32() * n) >> 32) > _M32:
            result += 1
        return result


def _words(rng, n):
    return " ".join(_WORDS[rng.below(len(_WORDS))] for _ in range(n))


def _hex(rng, n):
    return "".join("%x" % rng.below(16) for _ in range(n))


def generated(seed, tool, arguments):
    """What `benchgen eval`'s sandbox answers a valid call no recording matches."""
    h = hashlib.sha256()
    h.update(struct.pack("<Q", seed))
    h.update(b"output\0" + tool.encode() + b"\0" + dumps(canonical(arguments)).encode())
    rng = ChaCha8(h.digest())
    count = 1 + rng.below(3)
    items = []
    for _ in range(count):
        value = rng.below(100_000) / 100.0
        items.append({"id": _hex(rng, 8), "name": _words(rng, 2), "value": value})
    return {
        "tool": tool,
        "arguments": canonical(arguments),
        "result_id": "r-" + _hex(rng, 12),
        "summary": "%s: %d result(s), %s" % (tool.rsplit("::", 1)[-1], len(items), _words(rng, 4)),
        "items": items,
    }


# --- Arguments checked against the input schema (the sandbox's messages) -----------------

_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")


def _is_type(v, t):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if t == "integer":
        return isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    kinds = {"number": (int, float), "string": str, "array": list, "object": dict}
    # A type name the validator does not know makes the schema invalid there; no error here.
    return isinstance(v, kinds[t]) if t in kinds else True


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _resolve(root, ref):
    """A local `$ref` (`#/$defs/x`), or None."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _one_of(options):
    shown = [dumps(o) for o in options]
    if len(shown) <= 3:
        return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    return ", ".join(shown[:2]) + " or %d other candidates" % (len(shown) - 2)


def _plural(n, one, many):
    return "%d %s" % (n, one if n == 1 else many)


def _valid(v, schema, root, depth):
    errors = []
    _check(v, schema, root, (), errors, depth)
    return not errors


def _check_number(v, s, errors, at):
    for key, fails, says in (
        ("minimum", lambda m: v < m, "less than the minimum of"),
        ("maximum", lambda m: v > m, "greater than the maximum of"),
        ("exclusiveMinimum", lambda m: v <= m, "less than or equal to the minimum of"),
        ("exclusiveMaximum", lambda m: v >= m, "greater than or equal to the maximum of"),
    ):
        if _is_number(s.get(key)) and fails(s[key]):
            errors.append((at, "%s is %s %s" % (dumps(v), says, dumps(s[key]))))
    m = s.get("multipleOf")
    if _is_number(m) and m > 0:
        if float(m).is_integer() and (isinstance(v, int) or float(v).is_integer()):
            ok = int(v) % int(m) == 0
        else:
            ok = v == 0 or (abs(v) >= m and (v / m) == math.floor(v / m))
        if not ok:
            shown = str(int(m)) if float(m).is_integer() else repr(float(m))
            errors.append((at, "%s is not a multiple of %s" % (dumps(v), shown)))


def _check_string(v, s, errors, at):
    if isinstance(s.get("minLength"), int) and len(v) < s["minLength"]:
        errors.append((at, "%s is shorter than %s" % (dumps(v), _plural(s["minLength"], "character", "characters"))))
    if isinstance(s.get("maxLength"), int) and len(v) > s["maxLength"]:
        errors.append((at, "%s is longer than %s" % (dumps(v), _plural(s["maxLength"], "character", "characters"))))
    if isinstance(s.get("pattern"), str):
        try:
            if not re.search(s["pattern"], v):
                errors.append((at, '%s does not match "%s"' % (dumps(v), s["pattern"])))
        except re.error:
            pass


def _check_array(v, s, root, at, errors, depth):
    prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
    for i, x in enumerate(v):
        sub = prefix[i] if i < len(prefix) else s.get("items")
        if isinstance(sub, (dict, bool)):
            _check(x, sub, root, at + (str(i),), errors, depth + 1)
    if isinstance(s.get("minItems"), int) and len(v) < s["minItems"]:
        errors.append((at, "%s has less than %s" % (dumps(v), _plural(s["minItems"], "item", "items"))))
    if isinstance(s.get("maxItems"), int) and len(v) > s["maxItems"]:
        errors.append((at, "%s has more than %s" % (dumps(v), _plural(s["maxItems"], "item", "items"))))
    if s.get("uniqueItems") is True and any(json_equal(v[i], v[j]) for i in range(len(v)) for j in range(i)):
        errors.append((at, "%s has non-unique elements" % dumps(v)))


def _check_object(v, s, root, at, errors, depth):
    props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
    patterns = s.get("patternProperties") if isinstance(s.get("patternProperties"), dict) else {}
    extra = []
    for k, x in v.items():
        matched = k in props
        if matched:
            _check(x, props[k], root, at + (k,), errors, depth + 1)
        for p, sub in patterns.items():
            try:
                if re.search(p, k):
                    matched = True
                    _check(x, sub, root, at + (k,), errors, depth + 1)
            except re.error:
                pass
        if not matched:
            extra.append(k)
    more = s.get("additionalProperties")
    if more is False and extra:
        names = ", ".join("'%s'" % k for k in extra)
        verb = "was" if len(extra) == 1 else "were"
        errors.append((at, "Additional properties are not allowed (%s %s unexpected)" % (names, verb)))
    elif isinstance(more, dict):
        for k in extra:
            _check(v[k], more, root, at + (k,), errors, depth + 1)
    for r in s.get("required") or []:
        if isinstance(r, str) and r not in v:
            errors.append((at, "%s is a required property" % dumps(r)))
    if isinstance(s.get("minProperties"), int) and len(v) < s["minProperties"]:
        errors.append((at, "%s has less than %s" % (dumps(v), _plural(s["minProperties"], "property", "properties"))))
    if isinstance(s.get("maxProperties"), int) and len(v) > s["maxProperties"]:
        errors.append((at, "%s has more than %s" % (dumps(v), _plural(s["maxProperties"], "property", "properties"))))


def _check(v, s, root, at, errors, depth=0):
    """The errors of `v` under schema `s`: (instance path, message), as the sandbox's
    validator words them for the keywords tool schemas use."""
    if s is False:
        errors.append((at, "False schema does not allow %s" % dumps(v)))
    if not isinstance(s, dict) or depth > 64:
        return
    if "$ref" in s:
        target = _resolve(root, s["$ref"])
        if target is not None:
            _check(v, target, root, at, errors, depth + 1)
    t = s.get("type")
    kinds = [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []
    if kinds and not any(_is_type(v, k) for k in kinds):
        if len(set(kinds)) == 1:
            errors.append((at, '%s is not of type "%s"' % (dumps(v), kinds[0])))
        else:
            shown = ", ".join('"%s"' % k for k in sorted(set(kinds)))
            errors.append((at, "%s is not of types %s" % (dumps(v), shown)))
    if isinstance(s.get("enum"), list) and not any(json_equal(v, o) for o in s["enum"]):
        errors.append((at, "%s is not one of %s" % (dumps(v), _one_of(s["enum"]) if s["enum"] else "")))
    if "const" in s and not json_equal(v, s["const"]):
        errors.append((at, "%s was expected" % dumps(s["const"])))
    if _is_number(v):
        _check_number(v, s, errors, at)
    elif isinstance(v, str):
        _check_string(v, s, errors, at)
    elif isinstance(v, list):
        _check_array(v, s, root, at, errors, depth)
    elif isinstance(v, dict):
        _check_object(v, s, root, at, errors, depth)
    for sub in s.get("allOf") or []:
        _check(v, sub, root, at, errors, depth + 1)
    if isinstance(s.get("anyOf"), list) and s["anyOf"] and not any(_valid(v, x, root, depth + 1) for x in s["anyOf"]):
        errors.append((at, "%s is not valid under any of the schemas listed in the 'anyOf' keyword" % dumps(v)))
    if isinstance(s.get("oneOf"), list) and s["oneOf"]:
        n = sum(_valid(v, x, root, depth + 1) for x in s["oneOf"])
        if n != 1:
            says = "is not valid under any" if n == 0 else "is valid under more than one"
            errors.append((at, "%s %s of the schemas listed in the 'oneOf' keyword" % (dumps(v), says)))
    if isinstance(s.get("not"), (dict, bool)) and _valid(v, s["not"], root, depth + 1):
        errors.append((at, "%s is not allowed for %s" % (dumps(s["not"]), dumps(v))))
    if isinstance(s.get("if"), (dict, bool)):
        branch = "then" if _valid(v, s["if"], root, depth + 1) else "else"
        if isinstance(s.get(branch), (dict, bool)):
            _check(v, s[branch], root, at, errors, depth + 1)


def invalid(tool, arguments, schema):
    """The sandbox's tool-error text for arguments that do not fit `schema`, or None."""
    errors = []
    _check(arguments, schema, schema, (), errors)
    if not errors:
        return None
    shown = []
    for at, message in errors:
        path = ".".join(p.replace("~", "~0").replace("/", "~1") for p in at)
        shown.append("`%s`: %s" % ("arguments." + path if path else "arguments", message))
    return "invalid arguments for `%s`: %s" % (tool, "; ".join(sorted(set(shown))))


# --- The release: samples, tools, recordings, tool spaces ----------------------------------


def norm_tool_id(tool):
    server, sep, name = tool.partition("::")
    return server.strip() + "::" + name.strip() if sep else tool.strip()


def function_names(ids):
    """OpenAI function names for tool ids, as benchgen's agent names them."""
    base = {i: re.sub(r"[^A-Za-z0-9_-]", "_", i.replace("::", "__")) for i in sorted(set(ids))}
    count = {}
    for b in base.values():
        count[b] = count.get(b, 0) + 1
    names = {}
    for i, b in base.items():
        if not b or len(b) > 64 or count[b] > 1:
            b = b[:55] + "_" + hashlib.sha256(i.encode()).hexdigest()[:8]
        names[i] = b
    return names


def _jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Release:
    """The files of a release folder the task reads."""

    def __init__(self, root=RELEASE):
        self.samples = _jsonl(root / "samples.jsonl")
        catalog = json.loads((root / "inspect" / "tools.json").read_text(encoding="utf-8"))
        self.seed = catalog["seed"]
        self.tools = {t["tool_id"]: t for t in catalog["tools"]}
        cassettes = root / "cassettes.jsonl"
        self.cassettes = {c["id"]: c["calls"] for c in _jsonl(cassettes)} if cassettes.exists() else {}
        self.efs = {}
        sets = root / "tool_equivalence_sets.json"
        for s in json.loads(sets.read_text(encoding="utf-8")) if sets.exists() else []:
            members = set()
            for t in s.get("tools") or []:
                if (t.get("tool_id") or "").strip():
                    members.add(norm_tool_id(t["tool_id"]))
                elif (t.get("server_name") or "").strip() and (t.get("tool_name") or "").strip():
                    members.add(t["server_name"].strip() + "::" + t["tool_name"].strip())
            for m in members:
                self.efs.setdefault(m, set()).update(members)

    def space(self, sample):
        """The oracle tool space: the reference's tools and their EFS members; with no
        reference call, every released tool of the sample's track."""
        ids = set()
        for turn in sample["turns"]:
            for call in turn["reference_plan"]:
                for alt in call["alternatives"]:
                    ids.add(alt)
                    ids.update(self.efs.get(alt, ()))
        if not ids:
            track = "filter" if sample["family"] == "etom" else "logs-import"
            ids = {i for i, t in self.tools.items() if t["catalog"] == track}
        return sorted(i for i in ids if i in self.tools)


def _bare(tool):
    """The tool name after the last `::`."""
    return tool.rsplit("::", 1)[-1]


class Sandbox:
    """The tools of one sample, answered as `benchgen eval`'s sandbox answers them."""

    def __init__(self, release, sample):
        self.seed = release.seed
        self.ids = release.space(sample)
        self.tools = release.tools
        self.names = function_names(self.ids)
        self.by_name = {n: i for i, n in self.names.items()}
        self.recorded = {}
        for c in release.cassettes.get(sample["id"], []):
            self.recorded.setdefault((c["tool"], dumps(canonical(normal(c["arguments"])))), c["result"])
        recorded_tools = {t for t, _ in self.recorded}
        # The recordings a tool answers from: its own, else the one recorded tool with its bare
        # name when no other tool offered has that name (the sandbox's rule).
        catalog_bare = {}
        for i in self.ids:
            catalog_bare[_bare(i)] = catalog_bare.get(_bare(i), 0) + 1
        self.recorded_as = {}
        for i in self.ids:
            if i in recorded_tools:
                self.recorded_as[i] = i
            elif catalog_bare[_bare(i)] == 1:
                same = [r for r in sorted(recorded_tools) if _bare(r) == _bare(i)]
                if len(same) == 1:
                    self.recorded_as[i] = same[0]

    def schema(self, tool):
        s = self.tools[tool].get("input_schema")
        return s if isinstance(s, dict) else {"type": "object"}

    def answer(self, tool, arguments):
        """(answer kind, text): `recorded`, `generated` or `tool_error`."""
        refused = invalid(tool, arguments, self.schema(tool))
        if refused is not None:
            return "tool_error", refused
        key = dumps(canonical(arguments))
        kind = "recorded" if (tool, key) in self.recorded else "generated"
        text = self.recorded.get((self.recorded_as.get(tool), key))
        if text is None:
            text = dumps(generated(self.seed, tool, arguments))
        return kind, text


# --- Scoring: `benchgen score`'s corrected mode, per sample ---------------------------------

BUDGET = 200_000


def _augment(p, stamp, cand, owner, seen):
    for n in cand[p]:
        if seen[n] == stamp:
            continue
        seen[n] = stamp
        if owner[n] is None or _augment(owner[n], stamp, cand, owner, seen):
            owner[n] = p
            return True
    return False


def max_matching_assign(cand, right):
    owner, seen = [None] * right, [-1] * right
    for p in range(len(cand)):
        _augment(p, p, cand, owner, seen)
    assign = [None] * len(cand)
    for n, p in enumerate(owner):
        if p is not None:
            assign[p] = n
    return assign


def max_matching(cand, right):
    return sum(a is not None for a in max_matching_assign(cand, right))


def _placement(assign, group, deps):
    node_group = [None] * len(deps)
    for p, n in enumerate(assign):
        if n is not None:
            node_group[n] = group[p]
    placed = [
        n is not None and all(node_group[d] is not None and node_group[d] < group[p] for d in deps[n])
        for p, n in enumerate(assign)
    ]
    return sum(a is not None for a in assign), sum(placed)


def placed_matching(cand, group, deps):
    """(matched, correctly placed): a maximum matching placing the most calls correctly."""
    nodes, preds = len(deps), len(cand)
    if all(len(c) <= 1 for c in cand) and all(sum(n in c for c in cand) <= 1 for n in range(nodes)):
        return _placement([c[0] if c else None for c in cand], group, deps)
    target = max_matching(cand, nodes)
    order = sorted(range(preds), key=lambda p: group[p])
    after = [0] * (preds + 1)
    for i in range(preds - 1, -1, -1):
        after[i] = after[i + 1] + (1 if cand[order[i]] else 0)
    st = {"steps": 0, "best": None}
    node_group, assign = [None] * nodes, [None] * preds

    def dfs(i, matched, placed):
        st["steps"] += 1
        if st["steps"] >= BUDGET or matched + after[i] < target:
            return
        if st["best"] is not None and placed + after[i] <= st["best"][0]:
            return
        if i == len(order):
            st["best"] = (placed, list(assign))
            return
        p = order[i]
        g = group[p]
        for n in cand[p]:
            if node_group[n] is not None:
                continue
            ok = all(node_group[d] is not None and node_group[d] < g for d in deps[n])
            node_group[n], assign[p] = g, n
            dfs(i + 1, matched + 1, placed + ok)
            node_group[n], assign[p] = None, None
        dfs(i + 1, matched, placed)

    dfs(0, 0, 0)
    best = st["best"][1] if st["best"] is not None else max_matching_assign(cand, nodes)
    return _placement(best, group, deps)


def prf(tp_p, tp_r, pred, gold):
    if pred == 0 and gold == 0:
        p, r = 1.0, 1.0
    elif pred == 0:
        p, r = 0.0, 0.0
    elif gold == 0:
        p, r = 0.0, 1.0
    else:
        p, r = tp_p / pred, tp_r / gold
    f1 = 2.0 * p * r / (p + r) if p + r > 0 else 0.0
    return {"p": p, "r": r, "f1": f1, "tp_p": tp_p, "tp_r": tp_r, "pred": pred, "gold": gold}


def key_for(family, tool):
    """ETOM compares whole tool ids, FinMCP the tool name (logs name no server)."""
    return tool.partition("::")[2] if family == "finmcp" and "::" in tool else tool


def _check_deps(calls):
    """Dependencies as `benchgen score` keeps them: real, earlier or later, no cycle."""
    n = len(calls)
    for i, c in enumerate(calls):
        kept = []
        for d in c["deps"]:
            if d < n and d != i and d not in kept:
                kept.append(d)
        c["deps"] = kept
    indeg = [len(c["deps"]) for c in calls]
    done = [False] * n
    progress = True
    while progress:
        progress = False
        for i in range(n):
            if not done[i] and indeg[i] == 0:
                done[i] = progress = True
                for j, c in enumerate(calls):
                    indeg[j] -= c["deps"].count(i)
    for i in range(n):
        if not done[i]:
            calls[i]["deps"] = []


def gold(sample):
    """The sample as `benchgen score` reads it from `samples.jsonl`."""
    fam = sample["family"]
    turns = []
    for turn in sample["turns"]:
        calls = []
        for c in turn["reference_plan"]:
            alts = [key_for(fam, norm_tool_id(a)) for a in c["alternatives"]]
            calls.append({"alts": [a for a in alts if a], "group": c["group"], "deps": list(c.get("depends_on") or [])})
        _check_deps(calls)
        turns.append(calls)
    n = sum(len(t["reference_plan"]) for t in sample["turns"])
    scenario = [s.strip() for s in sample.get("scenario") or [] if s.strip()]
    return {
        "id": sample["id"],
        "family": fam,
        "kind": sample["kind"],
        "difficulty": "easy" if n <= 5 else "medium" if n <= 10 else "hard",
        "category": scenario[0] if scenario else "(none)",
        "scenario": " / ".join(scenario[:2]) if scenario else "(none)",
        "turns": turns,
    }


def _result(item):
    return {k: item[k] for k in ("id", "family", "kind", "difficulty", "category", "scenario")}


def score_etom(item, pred_turns):
    res = _result(item)
    alts, deps = [], []
    for turn in item["turns"]:
        base = len(alts)
        for c in turn:
            alts.append(c["alts"])
            deps.append([d + base for d in c["deps"]])
    calls, offset = [], 0
    for turn in pred_turns:
        calls.extend((key_for("etom", c["tool"]), c["group"] + offset) for c in turn)
        offset += max((c["group"] for c in turn), default=-1) + 1
    if item["kind"] == "L5":
        v = 1.0 if not calls else 0.0
        res["em"] = not calls
        res["calls"] = {"p": v, "r": v, "f1": v, "tp_p": 0, "tp_r": 0, "pred": len(calls), "gold": 0}
        return res
    cand = [[n for n, a in enumerate(alts) if t and t in a] for t, _ in calls]
    matched, placed = placed_matching(cand, [g for _, g in calls], deps)
    counts = prf(placed, matched, len(calls), len(alts))
    res["em"] = counts["f1"] == 1.0 and matched == len(alts) and placed == len(calls)
    if item["kind"] in ("L3", "L4"):
        res["node_set_em"] = matched == len(alts) and len(calls) == len(alts)
    res["calls"] = counts
    return res


def _groups(pairs):
    out, last = [], object()
    for g, x in sorted(pairs, key=lambda p: p[0]):
        if g != last:
            out.append([])
            last = g
        out[-1].append(x)
    return out


def score_finmcp(item, pred_turns):
    res = _result(item)
    gt, pt = len(item["turns"]), len(pred_turns)
    tp = n_pred = n_gold = stp = s_pred = s_gold = 0
    em, turns = True, []
    for t in range(max(gt, pt)):
        ref = item["turns"][t] if t < gt else []
        predc = pred_turns[t] if t < pt else []
        keys = [key_for("finmcp", c["tool"]) for c in predc]
        cand = [[i for i, g in enumerate(ref) if k and k in g["alts"]] for k in keys]
        matched = max_matching(cand, len(ref))
        tp, n_pred, n_gold = tp + matched, n_pred + len(keys), n_gold + len(ref)
        pset = []
        for k in keys:
            if k and k not in pset:
                pset.append(k)
        gset = []
        for g in ref:
            if g["alts"] not in gset:
                gset.append(g["alts"])
        stp += max_matching([[i for i, a in enumerate(gset) if k in a] for k in pset], len(gset))
        s_pred += len(pset) + sum(1 for k in keys if not k)
        s_gold += len(gset)
        gg = _groups((g["group"], g["alts"]) for g in ref)
        pg = _groups((c["group"], k) for c, k in zip(predc, keys))
        turn_em = len(gg) == len(pg) and all(
            len(g) == len(p)
            and max_matching([[i for i, a in enumerate(g) if k and k in a] for k in p], len(g)) == len(g)
            for g, p in zip(gg, pg)
        )
        em = em and turn_em
        if item["kind"] == "multi_turn" or gt > 1:
            turns.append(
                {"turn": t, "em": turn_em, "gold_calls": len(ref), "pred_calls": len(keys), "matched": matched}
            )
    res["em"] = em
    res["calls"] = prf(tp, tp, n_pred, n_gold)
    res["tool_set"] = prf(stp, stp, s_pred, s_gold)
    if turns:
        res["turns"] = turns
    return res


def score_sample(sample, prediction):
    """`benchgen score --per-sample`'s record of one sample (corrected mode, without its
    reasons) for a unified prediction."""
    item = gold(sample)
    pred_turns = [
        [{"tool": norm_tool_id(c["tool"]), "group": c["group"]} for c in turn["calls"]]
        for turn in prediction.get("turns") or []
    ]
    res = score_etom(item, pred_turns) if item["family"] == "etom" else score_finmcp(item, pred_turns)
    res["status"] = "correct" if res["em"] else "wrong"
    return res


def prediction(sample_id, turns):
    """The unified prediction of a run: every call within the cap, or a refusal."""
    kept = [[c for c in t["calls"] if c["answer"] != "over_cap"] for t in turns]
    if not any(kept):
        return {"id": sample_id, "refusal": True}
    shown = [[{"tool": c["tool"], "group": c["group"], "arguments": c["arguments"]} for c in t] for t in kept]
    return {"id": sample_id, "turns": [{"calls": calls} for calls in shown]}


# --- Inspect: the task, its agent and its scorer --------------------------------------------

_OFFERED = {"format", "description", "default", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum"}


def _offered(schema, root, depth=0):
    """The part of a JSON schema Inspect's tool schema can carry (it has no `oneOf`,
    `$ref`, `const`…; the arguments are still checked against the whole schema)."""
    if not isinstance(schema, dict) or depth > 16:
        return {}
    if "$ref" in schema:
        target = _resolve(root, schema["$ref"])
        schema = {**(target if isinstance(target, dict) else {}), **{k: v for k, v in schema.items() if k != "$ref"}}
    out = {k: v for k, v in schema.items() if k in _OFFERED}
    t = schema.get("type")
    if t in _TYPES or (isinstance(t, list) and t and all(x in _TYPES for x in t)):
        out["type"] = t
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _offered(v, root, depth + 1) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _offered(schema["items"], root, depth + 1)
    more = schema.get("additionalProperties")
    if isinstance(more, bool) or isinstance(more, dict):
        out["additionalProperties"] = more if isinstance(more, bool) else _offered(more, root, depth + 1)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        out["anyOf"] = [_offered(b, root, depth + 1) for b in branches]
    if isinstance(schema.get("required"), list):
        out["required"] = [r for r in schema["required"] if isinstance(r, str)]
    return out


def _param(schema):
    try:
        return JSONSchema.model_validate(schema)
    except Exception:  # a schema Inspect's model refuses: offered untyped, still checked
        return JSONSchema(description=schema.get("description") if isinstance(schema.get("description"), str) else None)


def tool_info(sandbox, tool):
    schema = sandbox.schema(tool)
    offered = _offered(schema, schema)
    more = offered.get("additionalProperties")
    params = ToolParams(
        properties={k: _param(v) for k, v in (offered.get("properties") or {}).items()},
        required=offered.get("required") or [],
        additionalProperties=_param(more) if isinstance(more, dict) else more,
    )
    description = sandbox.tools[tool].get("description") or ""
    return ToolInfo(name=sandbox.names[tool], description=description, parameters=params)


def _history(sample, t, sandbox, system_prompt):
    """The gold conversation before turn `t`, then its user message."""
    messages = [ChatMessageSystem(content=system_prompt)]
    for i, turn in enumerate(sample["turns"][:t]):
        messages.append(ChatMessageUser(content=turn["user"]))
        groups = [[c for c in g if c.get("left_out") is None] for g in turn.get("trajectory") or []]
        groups = [g for g in groups if g]
        if not turn.get("trajectory"):
            by_group = {}
            for c in turn["reference_plan"]:
                tool = c["alternatives"][0] if c["alternatives"] else ""
                by_group.setdefault(c["group"], []).append({"tool": tool, "arguments": {}})
            groups = [by_group[g] for g in sorted(by_group)]
        for g, calls in enumerate(groups):
            ids = ["gold_%d_%d_%d" % (i, g, k) for k in range(len(calls))]
            tool_calls = [
                ToolCall(
                    id=cid,
                    function=sandbox.names.get(c["tool"], c["tool"]),
                    arguments=c["arguments"] if isinstance(c["arguments"], dict) else {},
                )
                for c, cid in zip(calls, ids)
            ]
            messages.append(ChatMessageAssistant(content="", tool_calls=tool_calls))
            for c, cid, tc in zip(calls, ids, tool_calls):
                content = c.get("result") if c.get("result") is not None else c.get("error") or ""
                messages.append(ChatMessageTool(content=content, tool_call_id=cid, function=tc.function))
        messages.append(ChatMessageAssistant(content=turn.get("gold_reply") or ""))
    messages.append(ChatMessageUser(content=sample["turns"][t]["user"]))
    return messages


def _cut(text, limit):
    n = len(text)
    return text if n <= limit else "%s\n[cut: %d of %d characters shown]" % (text[:limit], limit, n)


def _call(sandbox, call, group):
    """One tool call of the model: its record and what the model is told."""
    tool = sandbox.by_name.get(call.function)
    record = {"tool": tool or call.function, "offered": tool is not None, "group": group}
    if tool is None:
        text = "unknown tool `%s`; use one of the listed tools" % call.function
        record.update(arguments=normal(call.arguments or {}), answer="unknown_tool", result=text)
        return record, "tool error: " + text
    if call.parse_error is not None or not isinstance(call.arguments, dict):
        text = "the arguments are not a JSON object; send a JSON object"
        record.update(arguments={}, answer="not_executed", result=text)
        return record, "tool error: " + text
    arguments = normal(call.arguments)
    kind, text = sandbox.answer(tool, arguments)
    record.update(arguments=arguments, answer=kind, result=text)
    return record, ("tool error: " + text) if kind == "tool_error" else text


async def _turn(model, messages, infos, sandbox, cfg):
    """The agent loop on one turn, as `benchgen eval` runs it."""
    run = {"status": "answered", "calls": [], "answer": None}
    # Each nudge once per turn: the call nudge before any call, the answer nudge after.
    executed, groups, nudged, nudge = 0, 0, set(), None
    # (function, arguments as serde_json writes them) of the calls run in this turn: small models
    # ask for one call again and again until the cap, so a group of only those is not run again.
    # Keyed by their JSON text, as benchgen compares `serde_json::Value`s: 1, 1.0 and true differ.
    # A call whose arguments are not a JSON object is never a repeat, as in benchgen.
    ran = set()

    def key(c):
        args = c.arguments
        if c.parse_error is not None or not isinstance(args, dict):
            return None
        return (c.function, dumps(canonical(normal(args))))

    while True:
        extra = [ChatMessageSystem(content=nudge)] if nudge else []
        output = await model.generate(messages + extra, tools=infos)
        nudge = None
        reply = output.message
        calls = list(reply.tool_calls or [])
        blank = not calls and _wordless(reply.text)
        repeat = bool(calls) and all(key(c) in ran for c in calls)
        # After calls (or a repeat) the model is asked to answer; before any, to call or answer.
        which = "answer_nudge" if (executed > 0 or repeat) else "call_nudge"
        if (repeat or blank) and which not in nudged and cfg[which]:
            nudged.add(which)
            nudge = cfg[which]
            continue
        if repeat:
            run["status"] = "repeated"
            return run, output
        messages.append(reply)
        if not calls:
            run["answer"] = reply.text or ""
            return run, output
        group, groups = groups, groups + 1
        if executed + len(calls) > cfg["max_calls"]:
            note = "not executed: the call cap of %d was reached" % cfg["max_calls"]
            for c in calls:
                tool = sandbox.by_name.get(c.function)
                run["calls"].append(
                    {"tool": tool or c.function, "offered": tool is not None, "group": group,
                     "arguments": normal(c.arguments or {}), "answer": "over_cap", "result": note}
                )
            run["status"] = "cap_reached"
            return run, output
        executed += len(calls)
        for c in calls:
            record, told = _call(sandbox, c, group)
            run["calls"].append(record)
            if key(c) is not None:
                ran.add(key(c))
            content = _cut(told, cfg["tool_result_chars"])
            messages.append(ChatMessageTool(content=content, tool_call_id=c.id, function=c.function))


@solver
def benchgen_agent(
    max_calls=20, system_prompt=SYSTEM_PROMPT, answer_nudge=ANSWER_NUDGE, call_nudge=CALL_NUDGE, tool_result_chars=8000
):
    cfg = {
        "max_calls": int(max_calls),
        "answer_nudge": answer_nudge,
        "call_nudge": call_nudge,
        "tool_result_chars": int(tool_result_chars),
    }

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        sample = state.metadata["sample"]
        sandbox = Sandbox(_release(), sample)
        infos = [tool_info(sandbox, t) for t in sandbox.ids]
        model = get_model()
        # As in `benchgen eval`: a cap below the reference's own calls would make the sample
        # unsolvable by construction, so each turn may make the calls of its largest turn.
        needed = max([len(t["reference_plan"]) for t in sample["turns"]] or [0])
        turn_cfg = dict(cfg, max_calls=max(cfg["max_calls"], needed))
        turns = []
        for t in range(len(sample["turns"])):
            messages = _history(sample, t, sandbox, system_prompt)
            run, output = await _turn(model, messages, infos, sandbox, turn_cfg)
            turns.append(run)
            state.messages, state.output = messages, output
        state.store.set("benchgen_turns", turns)
        return state

    return solve


@scorer(metrics={"em": [mean(), stderr()], "precision": [mean()], "recall": [mean()], "f1": [mean()]}, name="benchgen")
def benchgen_scorer():
    async def score(state: TaskState, target: Target) -> Score:
        sample = state.metadata["sample"]
        turns = state.store.get("benchgen_turns") or []
        pred = prediction(sample["id"], turns)
        result = score_sample(sample, pred)
        calls = result["calls"]
        return Score(
            value={"em": float(result["em"]), "precision": calls["p"], "recall": calls["r"], "f1": calls["f1"]},
            answer=(turns[-1]["answer"] or "") if turns else "",
            metadata={"score": result, "prediction": pred, "turns": turns},
        )

    return score


_RELEASE = {}


def _release():
    if "r" not in _RELEASE:
        _RELEASE["r"] = Release()
    return _RELEASE["r"]


@task
def benchgen(
    max_calls=20, system_prompt=SYSTEM_PROMPT, answer_nudge=ANSWER_NUDGE, call_nudge=CALL_NUDGE, tool_result_chars=8000
):
    """Every released sample, its oracle tools answered from the release's recordings."""
    samples = [
        Sample(
            id=s["id"],
            input=s["turns"][0]["user"] if s["turns"] else "",
            target=json.dumps([t["reference_plan"] for t in s["turns"]], ensure_ascii=False),
            metadata={"sample": s},
        )
        for s in _release().samples
    ]
    return Task(
        dataset=MemoryDataset(samples, name=RELEASE.name),
        solver=benchgen_agent(max_calls, system_prompt, answer_nudge, call_nudge, tool_result_chars),
        scorer=benchgen_scorer(),
    )


def _predictions(log, epoch=1):
    """The unified predictions of one epoch of an Inspect log, in sample id order."""
    found = {}
    for s in read_eval_log(log).samples or []:
        score = (s.scores or {}).get("benchgen")
        if s.epoch == epoch and score is not None and score.metadata:
            found[str(s.id)] = score.metadata["prediction"]
    return [found[k] for k in sorted(found)]


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 3) or args[0] != "predictions":
        sys.exit("usage: python benchgen_task.py predictions LOG [EPOCH] > predictions.jsonl")
    for p in _predictions(args[1], int(args[2]) if len(args) == 3 else 1):
        print(json.dumps(p, ensure_ascii=False, separators=(",", ":")))

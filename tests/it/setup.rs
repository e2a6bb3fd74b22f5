//! `scripts/setup.d/15-llm-server.sh`: a llama-server counts only once it has answered.
//! Stand-ins (test doubles): `fake_cmake` "builds" a server that dies by SIGILL when
//! configured native (as an AMX-using build does on a host that traps on AMX) and a small
//! Python HTTP server answering `/health` and `/completion` when configured portable.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::repo;

/// The stand-in server: answers as llama-server does, on the `--port` it is given.
const STANDIN_SERVER: &str = r#"#!/usr/bin/env python3
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, body):
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.end_headers(); self.wfile.write(body)
    def do_GET(self): self.reply(b'{"status":"ok"}')
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(b'{"content":" 4, 5"}')
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// The stand-in cmake: records each invocation; the build writes a server by flavour.
fn fake_cmake(dir: &Path) -> PathBuf {
    let script = format!(
        r#"#!/usr/bin/env bash
set -e
echo "$*" >> "{calls}"
if [ "$1" = "--build" ]; then
  b="$2"; mkdir -p "$b/bin"
  if grep -q -- "-DGGML_NATIVE=ON" "$b/flags"; then
    # With the marker, the native build runs the 0.5B model and segfaults on the 1.5B.
    printf '#!/bin/sh\nif [ -f "{marker}" ]; then case "$*" in *1.5b*) kill -SEGV $$;; esac; exec "{standin}" "$@"; fi\nkill -ILL $$\n' > "$b/bin/llama-server"
  else
    cp "{standin}" "$b/bin/llama-server"
  fi
  chmod +x "$b/bin/llama-server"
else
  args="$*"
  while [ $# -gt 0 ]; do if [ "$1" = "-B" ]; then b="$2"; fi; shift; done
  mkdir -p "$b"; printf '%s\n' "$args" > "$b/flags"
fi
"#,
        calls = dir.join("cmake-calls.txt").display(),
        standin = dir.join("standin-server.py").display(),
        marker = dir.join("native-runs-small-model").display(),
    );
    std::fs::write(dir.join("standin-server.py"), STANDIN_SERVER).unwrap();
    let p = dir.join("fake-cmake");
    std::fs::write(&p, script).unwrap();
    chmod_x(&p);
    chmod_x(&dir.join("standin-server.py"));
    p
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A cache with the 0.5B model's file (its content does not matter to the stand-ins) and
/// the vendored sources' folder (so nothing is downloaded).
fn cache(dir: &Path) -> PathBuf {
    let c = dir.join("cache");
    std::fs::create_dir_all(c.join("llm/models")).unwrap();
    std::fs::write(c.join("llm/models/qwen2.5-coder-0.5b-instruct.gguf"), b"stand-in").unwrap();
    std::fs::create_dir_all(c.join("llm/src/llama_cpp_python-0.3.36/vendor/llama.cpp")).unwrap();
    c
}

fn cpuinfo(dir: &Path, amx: bool) -> PathBuf {
    let p = dir.join(if amx { "cpuinfo-amx" } else { "cpuinfo" });
    let extra = if amx { " amx_bf16 amx_tile amx_int8" } else { "" };
    std::fs::write(&p, format!("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c bmi2{extra}\n")).unwrap();
    p
}

fn run_setup(dir: &Path, cache: &Path, cpuinfo: &Path) -> (bool, String) {
    let o = Command::new("bash")
        .arg(repo().join("scripts/setup.d/15-llm-server.sh"))
        .env("BENCHGEN_CACHE", cache)
        .env("CMAKE", fake_cmake(dir))
        .env("BENCHGEN_CPUINFO", cpuinfo)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("cmake-calls.txt")).unwrap_or_default()
}

fn python_present() -> bool {
    Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// One build can answer on the 0.5B model and die on the 1.5B (different kernels): the proof
/// runs both models when both are there, so such a build is rebuilt too.
#[test]
fn a_native_build_that_dies_only_on_the_larger_model_is_rebuilt_portable() {
    assert!(python_present(), "python3 is needed by setup itself");
    let dir = tempfile::tempdir().unwrap();
    let c = cache(dir.path());
    std::fs::write(c.join("llm/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), b"stand-in").unwrap();
    std::fs::write(dir.path().join("native-runs-small-model"), b"").unwrap();
    let (ok, out) = run_setup(dir.path(), &c, &cpuinfo(dir.path(), false));
    assert!(ok, "{out}");
    assert!(
        out.contains("check on qwen2.5-coder-1.5b-instruct-q4_k_m.gguf: killed by SIGSEGV"),
        "the 1.5B's crash is named: {out}"
    );
    assert!(!out.contains("check on qwen2.5-coder-0.5b-instruct.gguf"), "the 0.5B answered: {out}");
    assert!(out.contains("built (portable) and answering"), "{out}");
    assert_eq!(std::fs::read_to_string(c.join("llm/build/FLAVOUR")).unwrap().trim(), "portable");
}

#[test]
fn a_native_build_that_dies_by_sigill_is_rebuilt_portable_and_proved() {
    assert!(python_present(), "python3 is needed by setup itself");
    let dir = tempfile::tempdir().unwrap();
    let c = cache(dir.path());
    let (ok, out) = run_setup(dir.path(), &c, &cpuinfo(dir.path(), false));
    assert!(ok, "{out}");
    assert!(out.contains("building llama-server (native"), "{out}");
    assert!(out.contains("killed by SIGILL"), "the native build's death is named: {out}");
    assert!(out.contains("building llama-server (portable"), "{out}");
    assert!(out.contains("built (portable) and answering"), "{out}");
    assert_eq!(std::fs::read_to_string(c.join("llm/build/FLAVOUR")).unwrap().trim(), "portable");
    // The portable configure names the CPU's features and turns AMX off.
    let configure = calls(dir.path()).lines().filter(|l| l.contains("-DGGML_NATIVE=OFF")).count();
    assert_eq!(configure, 1, "{}", calls(dir.path()));
    let portable = calls(dir.path()).lines().find(|l| l.contains("-DGGML_NATIVE=OFF")).unwrap().to_string();
    for flag in ["-DGGML_AMX_TILE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_AVX512=OFF"] {
        assert!(portable.contains(flag), "{flag} missing from {portable}");
    }
    // Both flavours compile through the launcher that sets each file's level, given the
    // vendored sources' folder, and ccache never takes its place.
    // The launcher is the cache's copy (the build's CMake cache names it; the checkout may go).
    let sources = c.join("llm/src/llama_cpp_python-0.3.36/vendor/llama.cpp");
    let copy = c.join("llm/llama-compile");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(repo().join("scripts/setup.d/llama-compile")).unwrap());
    let launcher = format!("{};{}", copy.display(), sources.display());
    for configure in calls(dir.path()).lines().filter(|l| l.contains("-DGGML_NATIVE=")) {
        assert!(configure.contains(&format!("-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}")), "{configure}");
        assert!(configure.contains(&format!("-DCMAKE_C_COMPILER_LAUNCHER={launcher}")), "{configure}");
        assert!(configure.contains("-DGGML_CCACHE=OFF"), "{configure}");
    }

    // The next setup proves the cached build again and leaves it alone.
    std::fs::remove_file(dir.path().join("cmake-calls.txt")).unwrap();
    let (ok, out) = run_setup(dir.path(), &c, &cpuinfo(dir.path(), false));
    assert!(ok, "{out}");
    assert!(out.contains("present and answering (portable build"), "{out}");
    assert_eq!(calls(dir.path()), "", "a build that answers is not rebuilt");
}

#[test]
fn a_cached_build_that_does_not_run_is_detected_and_rebuilt() {
    assert!(python_present(), "python3 is needed by setup itself");
    let dir = tempfile::tempdir().unwrap();
    let c = cache(dir.path());
    // A build left by an earlier setup (or copied from another machine) that traps here.
    std::fs::create_dir_all(c.join("llm/build/bin")).unwrap();
    let server = c.join("llm/build/bin/llama-server");
    std::fs::write(&server, "#!/bin/sh\nkill -ILL $$\n").unwrap();
    chmod_x(&server);
    std::fs::write(c.join("llm/build/FLAVOUR"), "native\n").unwrap();
    let (ok, out) = run_setup(dir.path(), &c, &cpuinfo(dir.path(), true));
    assert!(ok, "{out}");
    assert!(out.contains("the cached native build does not run here; rebuilding"), "{out}");
    // This CPU advertises AMX: the portable flavour comes first, native is never tried.
    assert!(out.contains("advertises AMX"), "{out}");
    assert!(!calls(dir.path()).contains("-DGGML_NATIVE=ON"), "{}", calls(dir.path()));
    assert!(out.contains("built (portable) and answering"), "{out}");
}

#[test]
fn a_server_that_never_answers_fails_setup_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache(dir.path());
    // Every flavour of this "build" exits at once: setup must fail, not trust the file.
    let script = format!(
        "#!/usr/bin/env bash\necho \"$*\" >> {calls}\nif [ \"$1\" = --build ]; then mkdir -p \"$2/bin\"; \
         printf '#!/bin/sh\\necho model file is not a GGUF >&2\\nexit 1\\n' > \"$2/bin/llama-server\"; chmod +x \"$2/bin/llama-server\"; fi\n",
        calls = dir.path().join("cmake-calls.txt").display()
    );
    let cmake = dir.path().join("broken-cmake");
    std::fs::write(&cmake, script).unwrap();
    chmod_x(&cmake);
    let o = Command::new("bash")
        .arg(repo().join("scripts/setup.d/15-llm-server.sh"))
        .env("BENCHGEN_CACHE", &c)
        .env("CMAKE", &cmake)
        .env("BENCHGEN_CPUINFO", cpuinfo(dir.path(), false))
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("exited with status 1 during start-up"), "{out}");
    assert!(out.contains("model file is not a GGUF"), "the server log's tail is shown: {out}");
    assert!(out.contains("does not run on this machine even as a portable build"), "{out}");
}

/// The llama-server build's compiler launcher: the models' arithmetic (ggml) and libllama's
/// sampling, grammar, tokenizer and context keep the configured level; the rest is compiled
/// lower, and nothing but the level changes in the command it runs.
#[test]
fn the_build_launcher_lowers_all_but_the_arithmetic_and_libllama() {
    let root = "/cache/llm/src/llama_cpp_python-0.3.36/vendor/llama.cpp";
    let level_with = |root: &str, file: &str| {
        let o = Command::new(repo().join("scripts/setup.d/llama-compile"))
            .args([root, "echo", "c++", "-DX", "-O3", "-DNDEBUG", "-o", "x.o", "-c", file])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let line = String::from_utf8(o.stdout).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        // The command is the same but for its level, the compiler first.
        assert_eq!(words.len(), 8, "{line}");
        assert_eq!(words[0], "c++", "{line}");
        assert_eq!(words[7], file, "{line}");
        words[2].to_string()
    };
    let level = |file: &str| level_with(root, file);
    for (file, expected) in [
        ("ggml/src/ggml-cpu/ggml-cpu.c", "-O3"),
        ("ggml/src/ggml-cpu/llamafile/sgemm.cpp", "-O3"),
        ("src/llama-sampler.cpp", "-O3"),
        ("src/llama-grammar.cpp", "-O3"),
        ("src/llama-vocab.cpp", "-O3"),
        ("src/llama-model.cpp", "-O1"),
        ("src/models/qwen2.cpp", "-O1"),
        ("tools/server/server-context.cpp", "-O1"),
        ("common/arg.cpp", "-O1"),
        ("vendor/cpp-httplib/httplib.cpp", "-O1"),
        ("tools/mtmd/clip.cpp", "-O0"),
    ] {
        assert_eq!(level(&format!("{root}/{file}")), expected, "{file}");
    }
    // CMake's unity batches of src/models/ live in the build tree, not under the sources.
    assert_eq!(level("/cache/llm/build/src/CMakeFiles/llama.dir/Unity/unity_3_cxx.cxx"), "-O1");
    // The sources' own folder may contain `src/` (here `llm/src/`): levels follow the path
    // inside the sources, so the server is not taken for libllama.
    assert_eq!(level(&format!("{root}/tools/server/server.cpp")), "-O1");
    // A file outside the sources (another spelling of their folder) compiles as configured:
    // a mismatch never lowers ggml.
    assert_eq!(level("/elsewhere/llama.cpp/ggml/src/ggml.c"), "-O3");
    assert_eq!(level("/elsewhere/llama.cpp/common/arg.cpp"), "-O3");
    // The sources' folder given with a trailing slash is the same folder.
    assert_eq!(level_with(&format!("{root}/"), &format!("{root}/common/arg.cpp")), "-O1");
    assert_eq!(level_with(&format!("{root}/"), &format!("{root}/ggml/src/ggml.c")), "-O3");
}

/// `make demo` runs only the setup steps its run needs (`scripts/setup.sh demo`), `make
/// setup` and `make test` every step; a test-only step's note that names `make demo` must
/// not pull it in (it did once: the pattern matched "`make demo` skips it").
#[test]
fn the_demo_s_setup_is_the_models_the_server_and_the_embedding_assets() {
    let list = |args: &[&str]| {
        let out = Command::new(repo().join("scripts/setup.sh")).arg("--list").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(list(&["demo"]), ["00-system.sh", "10-llm-models.sh", "15-llm-server.sh", "20-embed.sh"]);
    let mut every: Vec<String> = std::fs::read_dir(repo().join("scripts/setup.d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sh"))
        .collect();
    every.sort();
    assert_eq!(list(&[]), every);
    // Every step says who needs it.
    for step in &every {
        let text = std::fs::read_to_string(repo().join("scripts/setup.d").join(step)).unwrap();
        assert!(text.lines().any(|l| l.starts_with("# needed by: ")), "{step} has no `# needed by:` line");
    }
    let bad = Command::new(repo().join("scripts/setup.sh")).args(["--list", "nightly"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("usage: scripts/setup.sh [--list] [demo]"));
}

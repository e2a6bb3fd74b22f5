//! The embedded default model: llama.cpp's `llama-server` started by benchgen.
//!
//! The server runs in its own process group on a free loopback port, with its stderr in a
//! log file `artifacts/llm/logs/llama-server.<benchgen pid>-<port>.log` (named in errors;
//! removed on a clean stop; a killed run's log stays there, never in `$TMPDIR`, and is
//! removed by the next start once its benchgen is gone). It is started by a guard thread that
//! owns the child: dropping [`LocalServer`] (normal exit, an error, Ctrl-C unwinding the
//! stage) tells the thread to stop it — SIGTERM to the group, SIGKILL after 5 s — and wait.
//! The child also gets `PR_SET_PDEATHSIG = SIGKILL`, tied to that thread, so even a
//! SIGKILLed benchgen leaves no orphan. Its group is registered with [`crate::children`],
//! whose registry alone stops every child on a signal, a closed stdout or a second Ctrl-C.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
pub struct LocalSpec {
    pub binary: PathBuf,
    pub model: PathBuf,
    pub threads: u32,
    /// Context per request; the server gets `ctx_size * parallel` shared by `parallel` slots.
    pub ctx_size: u32,
    /// Parallel slots (the endpoint's concurrency bound, so no request waits inside the server).
    pub parallel: usize,
    pub startup_timeout: Duration,
    /// Folder of the server logs (`artifacts/llm/logs`).
    pub log_dir: PathBuf,
    /// More arguments for llama-server (e.g. `--embeddings --pooling mean` for a server of
    /// embeddings).
    pub extra_args: Vec<String>,
}

/// Remove logs left by benchgen processes that no longer run (killed runs).
fn remove_stale_logs(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) =
            name.strip_prefix("llama-server.").and_then(|r| r.split_once('-')).and_then(|(p, _)| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks whether the process exists.
        let gone =
            unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

pub struct LocalServer {
    pid: u32,
    port: u16,
    log: PathBuf,
    /// Set by the guard thread when the process has ended (a shared server is then not reused).
    exited: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    guard: Option<std::thread::JoinHandle<()>>,
}

const SETUP_HINT: &str = "run `make setup` (scripts/setup.d/10-llm-models.sh assembles the models and 15-llm-server.sh builds and checks llama-server in $BENCHGEN_CACHE), or set `server_binary` / `model_path` in the role";

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("cannot find a free port: {e}"))
}

fn log_tail(path: &PathBuf) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// llama-server's command for `spec` on `port`, its output into `log` (created here), in its
/// own process group and killed with the thread that spawns it.
fn server_command(spec: &LocalSpec, port: u16, log: &Path) -> Result<Command, String> {
    let log_file = std::fs::File::create(log).map_err(|e| format!("cannot create `{}`: {e}", log.display()))?;
    let mut cmd = Command::new(&spec.binary);
    cmd.arg("-m")
        .arg(&spec.model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-t", &spec.threads.to_string(), "--no-webui"])
        .args(["-c", &(spec.ctx_size as usize * spec.parallel).to_string(), "-np", &spec.parallel.to_string()])
        .args(&spec.extra_args)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    Ok(cmd)
}

/// The guard thread's work: spawn the server and send its pid (or why it did not start),
/// watch it until stop is requested (or the owner is gone), then stop its group and reap it.
fn guard_child(
    mut cmd: Command,
    pid_tx: mpsc::Sender<Result<u32, String>>,
    stop_rx: mpsc::Receiver<()>,
    exited: Arc<AtomicBool>,
    status: Arc<std::sync::Mutex<Option<std::process::ExitStatus>>>,
) {
    // Held until the group is registered, so a signal landing in between still stops it.
    let spawning = crate::children::spawn_guard();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = pid_tx.send(Err(format!("cannot start llama-server: {e}")));
            return;
        }
    };
    let pg = child.id() as i32;
    crate::children::register(child.id());
    drop(spawning);
    let _ = pid_tx.send(Ok(child.id()));
    // Until stop is requested (or the owner is gone); an early exit is reported but
    // the group is still reaped below.
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(Duration::from_millis(200)) {
        if let Ok(Some(st)) = child.try_wait() {
            *status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
            exited.store(true, Ordering::SeqCst);
        }
    }
    // SAFETY: signals to our own child's process group.
    unsafe {
        libc::kill(-pg, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above; harmless when the group is already gone.
    unsafe {
        libc::kill(-pg, libc::SIGKILL);
    }
    let _ = child.wait();
    crate::children::unregister(child.id());
}

impl LocalServer {
    /// Start llama-server and wait until `/health` answers 200.
    pub async fn start(spec: &LocalSpec) -> Result<LocalServer, String> {
        if !spec.binary.is_file() {
            return Err(format!("llama-server not found at `{}`; {SETUP_HINT}", spec.binary.display()));
        }
        if !spec.model.is_file() {
            return Err(format!("model file not found at `{}`; {SETUP_HINT}", spec.model.display()));
        }
        let port = free_port()?;
        std::fs::create_dir_all(&spec.log_dir)
            .map_err(|e| format!("cannot create `{}`: {e}", spec.log_dir.display()))?;
        remove_stale_logs(&spec.log_dir);
        let log = spec.log_dir.join(format!("llama-server.{}-{port}.log", std::process::id()));
        let cmd = server_command(spec, port, &log)?;
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (pid_tx, pid_rx) = mpsc::channel::<Result<u32, String>>();
        let exited = Arc::new(AtomicBool::new(false));
        let exited_t = exited.clone();
        // How it ended, for the message when it dies during start-up.
        let status = Arc::new(std::sync::Mutex::new(None::<std::process::ExitStatus>));
        let status_t = status.clone();
        let guard = std::thread::Builder::new()
            .name("benchgen-llama-server".into())
            .spawn(move || guard_child(cmd, pid_tx, stop_rx, exited_t, status_t))
            .map_err(|e| format!("cannot start the llama-server guard thread: {e}"))?;
        let pid = match pid_rx.recv() {
            Ok(Ok(pid)) => pid,
            Ok(Err(e)) => {
                let _ = guard.join();
                return Err(e);
            }
            Err(_) => return Err("the llama-server guard thread died".into()),
        };
        // From here on, dropping `server` stops the process (also on the error paths below).
        let mut server = LocalServer {
            pid,
            port,
            log: log.clone(),
            exited: exited.clone(),
            stop: Some(stop_tx),
            guard: Some(guard),
        };
        tracing::info!("started llama-server pid {pid} on 127.0.0.1:{port} with `{}`", spec.model.display());
        let http = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}/health");
        let deadline = Instant::now() + spec.startup_timeout;
        loop {
            if exited.load(Ordering::SeqCst) {
                server.log = PathBuf::new(); // keep the log for the user
                let st = *status.lock().unwrap_or_else(|p| p.into_inner());
                let (how, fix) = describe_exit(st);
                return Err(format!(
                    "llama-server {how} during start-up; {fix} (log `{}`):\n{}",
                    log.display(),
                    log_tail(&log)
                ));
            }
            if let Ok(r) = http.get(&url).timeout(Duration::from_secs(2)).send().await
                && r.status().is_success()
            {
                return Ok(server);
            }
            if Instant::now() > deadline {
                server.log = PathBuf::new();
                return Err(format!(
                    "llama-server did not become healthy within {:.0}s (log `{}`):\n{}",
                    spec.startup_timeout.as_secs_f64(),
                    log.display(),
                    log_tail(&log)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Whether the process has ended since it answered its health check.
    pub fn has_exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

/// How a llama-server that died at start ended, and what to do about it. A crash by
/// SIGILL, or a SIGSEGV at start, is what a build using instructions this CPU does not run
/// leaves: on a host that advertises AMX yet traps on it, a native build dies by SIGILL in
/// `tinygemm_kernel_amx` on one model and by a general protection fault (SIGSEGV) on
/// `ldtilecfg` in `ggml_backend_amx_mul_mat` on another (both seen on one host,
/// docs/benchmarks.md#cold-start). `make setup` proves the server and rebuilds it portable.
pub fn describe_exit(status: Option<std::process::ExitStatus>) -> (String, &'static str) {
    use std::os::unix::process::ExitStatusExt;
    const REBUILD: &str = "run `make setup`, which checks the server and rebuilds it portable";
    let Some(st) = status else { return ("exited".into(), REBUILD) };
    match st.signal() {
        Some(sig @ (libc::SIGILL | libc::SIGSEGV)) => (
            format!(
                "was killed by {}: this llama-server build does not run on this CPU (it uses instructions \
                 the CPU does not execute, e.g. AMX)",
                signal_name(sig)
            ),
            REBUILD,
        ),
        Some(sig) => (format!("was killed by signal {sig} ({})", signal_name(sig)), REBUILD),
        None => (
            format!("exited with status {}", st.code().unwrap_or(-1)),
            "the log says why; `make setup` checks the server and the models",
        ),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGILL => "SIGILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL, e.g. out of memory",
        libc::SIGFPE => "SIGFPE",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// Servers kept for the rest of the command, one per spec, once [`keep_until_stopped`] is
/// called (the binary does): `benchgen run` starts each model once instead of once per stage
/// (a 1.5B model takes about 3 s to load on 2 cores, and llama-server's prompt cache, e.g. of
/// an agent's tool definitions, lives across stages). [`stop_shared`] stops them; a signal
/// stops them through [`crate::children`]. Without it (library use), a server lives as long as
/// the client that started it.
static SHARED: std::sync::Mutex<Vec<(LocalSpec, Arc<LocalServer>)>> = std::sync::Mutex::new(Vec::new());
static KEEP: AtomicBool = AtomicBool::new(false);

/// Keep every local server started from now on until [`stop_shared`].
pub fn keep_until_stopped() {
    KEEP.store(true, Ordering::SeqCst);
}

/// The running server for `spec`: with [`keep_until_stopped`], started on first use and kept
/// until [`stop_shared`] (a server that has died since is started again); otherwise a new one.
pub async fn shared(spec: &LocalSpec) -> Result<Arc<LocalServer>, String> {
    if !KEEP.load(Ordering::SeqCst) {
        return LocalServer::start(spec).await.map(Arc::new);
    }
    let found = {
        let mut all = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(_, s)| !s.has_exited());
        all.iter().find(|(k, _)| k == spec).map(|(_, s)| s.clone())
    };
    if let Some(s) = found {
        return Ok(s);
    }
    let server = Arc::new(LocalServer::start(spec).await?);
    let mut all = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    // Two first uses at once: keep the one registered first (the other stops when dropped).
    if let Some((_, s)) = all.iter().find(|(k, _)| k == spec) {
        return Ok(s.clone());
    }
    all.push((spec.clone(), server.clone()));
    Ok(server)
}

/// Stop every shared server (SIGTERM, then SIGKILL after 5 s) and remove its log. Called
/// when the command ends; the last user of a server may still hold it, which stops it then.
pub fn stop_shared() {
    let all = std::mem::take(&mut *SHARED.lock().unwrap_or_else(|p| p.into_inner()));
    drop(all);
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(g) = self.guard.take() {
            let _ = g.join();
        }
        let _ = std::fs::remove_file(&self.log);
        tracing::info!("stopped llama-server pid {}", self.pid);
    }
}

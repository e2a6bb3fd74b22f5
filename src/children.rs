//! Child processes (spawned MCP servers, local model servers) must not outlive benchgen.
//!
//! Each child runs in its own process group, so a signal sent to benchgen alone (SIGTERM
//! from a supervisor, SIGHUP from a closed terminal) does not reach it, and the default
//! action of those signals ends benchgen without running the destructors that kill the
//! groups: the child is left running, re-parented to init. [`install`] catches SIGTERM,
//! SIGHUP and SIGINT, forwards SIGTERM to every live group registered here, waits briefly,
//! SIGKILLs what is left and exits with 128 + the signal number.
//!
//! SIGINT is left to the LLM layer's graceful Ctrl-C handling once that is active
//! ([`set_graceful_interrupt`]): its first Ctrl-C cancels the stage, whose clean-up drops
//! the guards that kill the groups; its second calls [`kill_all`] and exits.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static GRACEFUL_SIGINT: AtomicBool = AtomicBool::new(false);
/// Set once a signal is being handled: the main thread must not exit first (with the
/// error its work gets when the children it talks to die), the handler exits.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// Called by `main` before it exits: while a signal is being handled, wait for the
/// handler to stop the children and exit with the signal's code.
pub fn wait_if_signalled() {
    if SIGNALLED.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Spawns in progress: a spawner holds this from before `spawn` until the child is
/// registered, and the signal handler takes it before collecting the groups, so a
/// signal that lands between the two still finds (and stops) the new child.
static SPAWN: Mutex<()> = Mutex::new(());

/// Hold while spawning a child process until [`register`] has recorded it.
pub fn spawn_guard() -> std::sync::MutexGuard<'static, ()> {
    SPAWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Record a live child process group (its leader's pid).
pub fn register(pgid: u32) {
    if let Ok(pg) = i32::try_from(pgid) {
        GROUPS.lock().unwrap_or_else(|p| p.into_inner()).insert(pg);
    }
}

/// Forget a group once it has been killed and reaped.
pub fn unregister(pgid: u32) {
    if let Ok(pg) = i32::try_from(pgid) {
        GROUPS.lock().unwrap_or_else(|p| p.into_inner()).remove(&pg);
    }
}

/// Ctrl-C is handled gracefully by the LLM layer from now on.
pub fn set_graceful_interrupt() {
    GRACEFUL_SIGINT.store(true, Ordering::SeqCst);
}

fn groups() -> Vec<i32> {
    GROUPS.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect()
}

fn signal_groups(groups: &[i32], sig: i32) {
    for &pg in groups {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pg, sig);
        }
    }
}

fn group_alive(pg: i32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-pg, 0) == 0 }
}

/// SIGKILL every registered group at once.
pub fn kill_all() {
    signal_groups(&groups(), libc::SIGKILL);
}

/// SIGTERM every registered group, wait up to `grace` for them to go, SIGKILL the rest
/// and reap what we can (children of this process).
pub fn terminate_all(grace: Duration) {
    let gs = groups();
    signal_groups(&gs, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    loop {
        reap();
        if !gs.iter().any(|&pg| group_alive(pg)) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    signal_groups(&gs, libc::SIGKILL);
    reap();
}

/// Collect exited children of this process (leaders of the groups), so none is left a
/// zombie while we finish exiting.
fn reap() {
    for &pg in &groups() {
        let mut status = 0;
        // SAFETY: waitpid on our own child pid with WNOHANG; `status` is a valid out pointer.
        unsafe {
            libc::waitpid(pg, &mut status, libc::WNOHANG);
        }
    }
}

/// Catch SIGTERM, SIGHUP and SIGINT for the rest of the process (see the module doc).
pub fn install() {
    let spawned = std::thread::Builder::new().name("benchgen-signals".into()).spawn(|| {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            let (Ok(mut term), Ok(mut hup), Ok(mut int)) =
                (signal(SignalKind::terminate()), signal(SignalKind::hangup()), signal(SignalKind::interrupt()))
            else {
                return;
            };
            let sig = loop {
                tokio::select! {
                    _ = term.recv() => break libc::SIGTERM,
                    _ = hup.recv() => break libc::SIGHUP,
                    _ = int.recv() => {
                        if !GRACEFUL_SIGINT.load(Ordering::SeqCst) {
                            break libc::SIGINT;
                        }
                    }
                }
            };
            SIGNALLED.store(true, Ordering::SeqCst);
            let name = match sig {
                libc::SIGTERM => "SIGTERM",
                libc::SIGHUP => "SIGHUP",
                _ => "SIGINT",
            };
            eprintln!("benchgen: interrupted ({name}); stopping child processes");
            // Wait for a spawn in progress to register its child, and start no new one.
            let _spawns = spawn_guard();
            terminate_all(Duration::from_secs(2));
            std::process::exit(128 + sig);
        });
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot watch for signals: {e}");
    }
}

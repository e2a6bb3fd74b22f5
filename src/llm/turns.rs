//! Turns of the local model servers on this machine's cores: requests to one local server
//! run together (its slots batch them), requests to another wait until they are done.
//!
//! Why: two llama-servers computing at once on a 2-core machine (the demo's 0.5B verifier
//! beside its 1.5B writer, the eval panel's two agents) each run their threads on the same
//! cores, and llama.cpp's threads wait for each other at every step of a token. Measured in
//! the servers' own timings on this session's 2-core machine: the 1.5B generated 13.8
//! tokens/s alone and about 1 token/s while the 0.5B computed too (the 0.5B: 24 and 1.5).
//! Taking turns, each runs at its own speed and the sum is far less.
//!
//! The order is fair: a server whose request waits is served once the current server's
//! running requests end, and the current server takes no new request while another waits.
//! Every request that waited before a hand-over goes in with it (a ticket older than the
//! hand-over), so a server keeps its slots' batching.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The turns of one machine (one per process: `TURNS`).
#[derive(Default)]
pub struct Turns {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// The server whose requests run now, and how many do.
    holder: Option<String>,
    running: usize,
    /// Servers waiting for their turn, first come first.
    queue: VecDeque<String>,
    /// Waiting requests per server.
    waiting: BTreeMap<String, usize>,
    /// The next waiting request's ticket, and the tickets the holder's hand-over admits
    /// (those below).
    next_ticket: u64,
    admit_below: u64,
    /// The holder's admitted requests that have not gone in yet: the turn is not passed on
    /// while one is on its way (a request that ended at once must not strand the others).
    granted: usize,
}

impl State {
    /// Passes the turn on when the holder has nothing running and nothing on its way: to
    /// the first server in the queue with a waiting request (or to none).
    fn settle(&mut self) -> bool {
        if self.holder.is_none() || self.running > 0 || self.granted > 0 {
            return false;
        }
        loop {
            self.holder = self.queue.pop_front();
            self.admit_below = self.next_ticket;
            self.granted = self.holder.as_ref().and_then(|h| self.waiting.get(h)).copied().unwrap_or(0);
            if self.holder.is_none() || self.granted > 0 {
                return true;
            }
        }
    }

    /// A waiting request leaves, admitted or given up.
    fn leave(&mut self, server: &str, ticket: u64) {
        if let Some(n) = self.waiting.get_mut(server) {
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(server);
                self.queue.retain(|q| q != server);
            }
        }
        if self.holder.as_deref() == Some(server) && ticket < self.admit_below {
            self.granted -= 1;
        }
    }
}

/// A running request's turn; dropping it ends the request's share of the turn.
pub struct Turn {
    turns: Arc<Turns>,
}

impl Turn {
    /// How many other requests of this process run on the same server now (the holder's).
    pub fn others(&self) -> usize {
        self.turns.lock().running.saturating_sub(1)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut s = self.turns.lock();
        s.running -= 1;
        if s.settle() {
            drop(s);
            self.turns.changed.notify_waiters();
        }
    }
}

/// A waiting request (registered in `waiting`); dropping it unregisters it and passes an
/// idle turn on (a cancelled request). An admitted one has left already.
struct Waiting<'a> {
    turns: &'a Arc<Turns>,
    server: &'a str,
    ticket: u64,
    admitted: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.admitted {
            return;
        }
        let mut s = self.turns.lock();
        s.leave(self.server, self.ticket);
        if s.settle() {
            drop(s);
            self.turns.changed.notify_waiters();
        }
    }
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for `server`'s turn. Cancel-safe: dropping the future gives up the place.
    pub async fn take(self: &Arc<Self>, server: &str) -> Turn {
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut s = self.lock();
                let others_wait = s.queue.iter().any(|q| q != server);
                let admitted = match (s.holder.as_deref(), &waiting) {
                    (None, _) => true,
                    (Some(h), None) => h == server && !others_wait,
                    (Some(h), Some(w)) => h == server && w.ticket < s.admit_below,
                };
                if admitted {
                    if let Some(w) = waiting.as_mut() {
                        s.leave(server, w.ticket);
                        w.admitted = true;
                    }
                    s.holder = Some(server.to_string());
                    s.running += 1;
                    return Turn { turns: self.clone() };
                }
                if waiting.is_none() {
                    let ticket = s.next_ticket;
                    s.next_ticket += 1;
                    *s.waiting.entry(server.to_string()).or_default() += 1;
                    if !s.queue.iter().any(|q| q == server) {
                        s.queue.push_back(server.to_string());
                    }
                    waiting = Some(Waiting { turns: self, server, ticket, admitted: false });
                }
            }
            changed.await;
        }
    }
}

static TURNS: std::sync::LazyLock<Arc<Turns>> = std::sync::LazyLock::new(Arc::default);

/// Wait for `server`'s turn among this process's local model servers.
pub async fn take(server: &str) -> Turn {
    TURNS.take(server).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Records which servers run at once.
    #[derive(Default)]
    struct Log {
        running: Mutex<BTreeMap<String, usize>>,
        mixed: Mutex<bool>,
        order: Mutex<Vec<String>>,
    }

    async fn request(turns: Arc<Turns>, log: Arc<Log>, server: &'static str, ms: u64) {
        let turn = turns.take(server).await;
        {
            let mut r = log.running.lock().unwrap();
            *r.entry(server.into()).or_default() += 1;
            if r.iter().filter(|(_, n)| **n > 0).count() > 1 {
                *log.mixed.lock().unwrap() = true;
            }
            log.order.lock().unwrap().push(server.into());
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        *log.running.lock().unwrap().get_mut(server).unwrap() -= 1;
        drop(turn);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_servers_never_run_at_once_and_each_keeps_its_batch() {
        let (turns, log) = (Arc::new(Turns::default()), Arc::new(Log::default()));
        let mut tasks = Vec::new();
        for i in 0..12 {
            let server = if i % 2 == 0 { "a" } else { "b" };
            tasks.push(tokio::spawn(request(turns.clone(), log.clone(), server, 20)));
        }
        tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(tasks)).await.expect("no deadlock");
        assert!(!*log.mixed.lock().unwrap(), "two servers ran at once");
        let order = log.order.lock().unwrap().clone();
        assert_eq!(order.len(), 12);
        // Taking turns, not one request at a time: far fewer switches than requests.
        let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(switches <= 3, "{order:?}");
        let s = turns.lock();
        assert_eq!((s.holder.as_deref(), s.running, s.queue.len(), s.waiting.len()), (None, 0, 0, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_server_is_served_before_new_requests_of_the_running_one() {
        let (turns, log) = (Arc::new(Turns::default()), Arc::new(Log::default()));
        let first = tokio::spawn(request(turns.clone(), log.clone(), "a", 100));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let b = tokio::spawn(request(turns.clone(), log.clone(), "b", 10));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let late_a = tokio::spawn(request(turns.clone(), log.clone(), "a", 10));
        for t in [first, b, late_a] {
            tokio::time::timeout(Duration::from_secs(10), t).await.expect("no deadlock").unwrap();
        }
        assert_eq!(*log.order.lock().unwrap(), ["a", "b", "a"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_wait_hands_an_idle_turn_on() {
        let turns = Arc::new(Turns::default());
        let a = turns.take("a").await;
        // b waits, then a ends: the turn is b's; b's only request is cancelled before it runs.
        let waiting_b = tokio::spawn({
            let turns = turns.clone();
            async move { turns.take("b").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let waiting_c = tokio::spawn({
            let turns = turns.clone();
            async move { turns.take("c").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        waiting_b.abort();
        let _ = waiting_b.await;
        drop(a);
        let c = tokio::time::timeout(Duration::from_secs(5), waiting_c).await.expect("c is served").unwrap();
        drop(c);
        let s = turns.lock();
        assert_eq!((s.holder.as_deref(), s.running, s.queue.len(), s.waiting.len()), (None, 0, 0, 0));
    }

    /// The review's race: the turn passes to x while x1 waits; y2 and x2 come; x1 is given
    /// up before it runs. The turn must go on (to y2, then x2), not stay with x idle.
    #[tokio::test]
    async fn a_request_given_up_after_its_turn_came_passes_the_turn_on() {
        use futures::FutureExt;
        let turns = Arc::new(Turns::default());
        let y1 = turns.take("y").await;
        let mut x1 = Box::pin(turns.take("x"));
        assert!((&mut x1).now_or_never().is_none(), "x1 waits");
        drop(y1);
        let mut y2 = Box::pin(turns.take("y"));
        assert!((&mut y2).now_or_never().is_none(), "y2 waits: the turn is x's");
        let mut x2 = Box::pin(turns.take("x"));
        assert!((&mut x2).now_or_never().is_none(), "x2 waits: y waits before it");
        drop(x1);
        let y2 = (&mut y2).now_or_never().expect("the turn went on to y");
        assert!((&mut x2).now_or_never().is_none());
        drop(y2);
        drop((&mut x2).now_or_never().expect("then to x"));
        let s = turns.lock();
        assert_eq!((s.holder.as_deref(), s.running, s.queue.len(), s.waiting.len()), (None, 0, 0, 0));
    }

    /// A request of the holder that ends at once does not strand the holder's other
    /// admitted request (the review's second race).
    #[tokio::test]
    async fn an_admitted_request_is_not_stranded_by_one_that_ended_at_once() {
        use futures::FutureExt;
        let turns = Arc::new(Turns::default());
        let y1 = turns.take("y").await;
        let mut a = Box::pin(turns.take("x"));
        let mut b = Box::pin(turns.take("x"));
        assert!((&mut a).now_or_never().is_none() && (&mut b).now_or_never().is_none());
        drop(y1);
        drop((&mut a).now_or_never().expect("a goes in"));
        let mut y2 = Box::pin(turns.take("y"));
        assert!((&mut y2).now_or_never().is_none(), "b is on its way: y waits");
        let b = (&mut b).now_or_never().expect("b goes in");
        drop(b);
        drop((&mut y2).now_or_never().expect("then y"));
    }
}

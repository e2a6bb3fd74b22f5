//! Several endpoints (replicas) behind one role: which one takes the next request.
//!
//! * **Least outstanding requests**: a request goes to the available endpoint with the
//!   fewest requests outstanding (waiting for a slot there or in flight); ties go to the one
//!   that was sent fewer requests so far, then to the earlier one in `base_urls`, so a
//!   sequential caller alternates over equal replicas too.
//! * **Taken out, and back**: `failover_after` consecutive failed attempts (retryable ones:
//!   429, 5xx, connection errors, timeouts, malformed bodies) take an endpoint out for
//!   `cooldown_s`; one success resets its count. After the cool-down it takes one request
//!   at a time until one succeeds (then it is fully back); a failure takes it out again at
//!   once.
//! * **All out**: a request waits for the earliest cool-down to end (Ctrl-C still stops it),
//!   then tries that endpoint; its retry count bounds the total.
//! * A retry of a request prefers an endpoint it has not failed on yet.
//!
//! With one endpoint nothing is ever taken out (there is nowhere else to go): the retry
//! back-off of [`super::transport`] applies as before.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default, Clone)]
struct Health {
    outstanding: usize,
    sent: u64,
    consecutive_failures: u32,
    out_until: Option<Instant>,
}

/// In: never taken out, or back from its cool-down with no request outstanding there.
fn available(h: &Health, now: Instant) -> bool {
    match h.out_until {
        None => true,
        Some(t) => t <= now && h.outstanding == 0,
    }
}

/// The health and load of a role's endpoints.
#[derive(Debug)]
pub struct Pool {
    state: Mutex<Vec<Health>>,
    failover_after: u32,
    cooldown: Duration,
}

/// The answer of [`Pool::pick`].
pub enum Pick {
    /// Send to endpoint `index`; the slot counts as outstanding until dropped.
    Ready(Slot),
    /// Every endpoint is out: the earliest is back at this instant.
    Wait(Instant),
}

/// One outstanding request at one endpoint (released on drop).
pub struct Slot {
    pool: Arc<Pool>,
    pub index: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.pool.lock();
        s[self.index].outstanding = s[self.index].outstanding.saturating_sub(1);
    }
}

/// What a failed attempt did to its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Counted; the endpoint stays in.
    Counted,
    /// The endpoint is out until the cool-down ends.
    TakenOut,
}

impl Pool {
    pub fn new(endpoints: usize, failover_after: u32, cooldown: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(vec![Health::default(); endpoints.max(1)]),
            failover_after: failover_after.max(1),
            cooldown,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Health>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn failover_after(&self) -> u32 {
        self.failover_after
    }

    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Choose an endpoint for the next attempt of a request that has already failed on the
    /// endpoints in `tried` (preferred last).
    pub fn pick(self: &Arc<Self>, tried: &[usize]) -> Pick {
        self.pick_at(tried, Instant::now())
    }

    fn pick_at(self: &Arc<Self>, tried: &[usize], now: Instant) -> Pick {
        let mut s = self.lock();
        let best = (0..s.len())
            .filter(|&i| available(&s[i], now))
            .min_by_key(|&i| (tried.contains(&i), s[i].outstanding, s[i].sent, i));
        match best {
            Some(i) => {
                s[i].outstanding += 1;
                s[i].sent += 1;
                Pick::Ready(Slot { pool: self.clone(), index: i })
            }
            None => {
                // An endpoint back from its cool-down is busy with its one trial request:
                // look again shortly. Otherwise wait for the earliest cool-down to end.
                let probing = s.iter().any(|h| h.out_until.is_some_and(|t| t <= now));
                let next = s.iter().filter_map(|h| h.out_until).filter(|&t| t > now).min();
                let poll = now + Duration::from_millis(100);
                Pick::Wait(if probing { next.map_or(poll, |t| t.min(poll)) } else { next.unwrap_or(poll) })
            }
        }
    }

    /// Whether a retry could go at once to an available endpoint not in `tried`.
    pub fn has_untried(&self, tried: &[usize]) -> bool {
        let now = Instant::now();
        let s = self.lock();
        (0..s.len()).any(|i| !tried.contains(&i) && available(&s[i], now))
    }

    pub fn success(&self, index: usize) {
        let mut s = self.lock();
        s[index].consecutive_failures = 0;
        s[index].out_until = None;
    }

    /// Count a failed attempt (a retryable one; a 400 says nothing about the endpoint).
    pub fn failure(&self, index: usize) -> Failure {
        self.failure_at(index, Instant::now())
    }

    fn failure_at(&self, index: usize, now: Instant) -> Failure {
        let mut s = self.lock();
        if s.len() < 2 {
            return Failure::Counted;
        }
        let h = &mut s[index];
        h.consecutive_failures = h.consecutive_failures.saturating_add(1);
        if h.consecutive_failures >= self.failover_after {
            h.out_until = Some(now + self.cooldown);
            Failure::TakenOut
        } else {
            Failure::Counted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(p: Pick) -> Slot {
        match p {
            Pick::Ready(s) => s,
            Pick::Wait(_) => panic!("expected an endpoint"),
        }
    }

    #[test]
    fn least_outstanding_then_fewest_sent() {
        let p = Pool::new(3, 3, Duration::from_secs(30));
        let a = ready(p.pick(&[]));
        let b = ready(p.pick(&[]));
        let c = ready(p.pick(&[]));
        assert_eq!((a.index, b.index, c.index), (0, 1, 2));
        drop(b);
        // Endpoint 1 has nothing outstanding now.
        let d = ready(p.pick(&[]));
        assert_eq!(d.index, 1);
        drop((a, c, d));
        // All idle, all sent once except 1 (twice): 0 then 2 then 1.
        let seq: Vec<usize> = (0..3).map(|_| ready(p.pick(&[])).index).collect();
        assert_eq!(seq, [0, 2, 0]);
    }

    #[test]
    fn a_retry_prefers_an_endpoint_it_has_not_failed_on() {
        let p = Pool::new(2, 3, Duration::from_secs(30));
        assert_eq!(ready(p.pick(&[0])).index, 1);
        assert_eq!(ready(p.pick(&[1])).index, 0);
        assert_eq!(ready(p.pick(&[0, 1])).index, 0);
        assert!(p.has_untried(&[0]));
        assert!(!p.has_untried(&[0, 1]));
    }

    #[test]
    fn repeated_failures_take_an_endpoint_out_until_the_cool_down_ends() {
        let p = Pool::new(2, 2, Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(p.failure_at(0, t0), Failure::Counted);
        p.success(0);
        assert_eq!(p.failure_at(0, t0), Failure::Counted, "a success resets the count");
        assert_eq!(p.failure_at(0, t0), Failure::TakenOut);
        for _ in 0..3 {
            assert_eq!(ready(p.pick_at(&[], t0)).index, 1);
        }
        // Both out: wait for the earliest.
        p.failure_at(1, t0 + Duration::from_secs(1));
        p.failure_at(1, t0 + Duration::from_secs(1));
        match p.pick_at(&[], t0 + Duration::from_secs(2)) {
            Pick::Wait(at) => assert_eq!(at, t0 + Duration::from_secs(30)),
            Pick::Ready(_) => panic!("both are out"),
        }
        // Back after the cool-down with one request at a time; one more failure takes it
        // out again at once, a success brings it fully back.
        let t30 = t0 + Duration::from_secs(30);
        let s = ready(p.pick_at(&[], t30));
        assert_eq!(s.index, 0);
        assert!(matches!(p.pick_at(&[], t30), Pick::Wait(_)), "its trial request is outstanding");
        assert_eq!(p.failure_at(0, t30), Failure::TakenOut);
        drop(s);
        assert!(matches!(p.pick_at(&[], t30), Pick::Wait(at) if at == t0 + Duration::from_secs(31)));
        let s = ready(p.pick_at(&[], t0 + Duration::from_secs(31)));
        assert_eq!(s.index, 1);
        p.success(1);
        let again = ready(p.pick_at(&[], t0 + Duration::from_secs(31)));
        assert_eq!(again.index, 1, "fully back: a second request while the first is outstanding");
    }

    #[test]
    fn one_endpoint_is_never_taken_out() {
        let p = Pool::new(1, 1, Duration::from_secs(30));
        for _ in 0..5 {
            assert_eq!(p.failure(0), Failure::Counted);
        }
        assert_eq!(ready(p.pick(&[])).index, 0);
    }
}

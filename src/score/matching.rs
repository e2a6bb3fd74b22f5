//! One-to-one matching of predicted calls to reference calls.
//!
//! Two problems, both small per sample (tens of calls at most):
//! - [`max_matching`]: maximum bipartite matching (Kuhn's augmenting paths), used for call
//!   multisets, tool sets and parallel groups;
//! - [`placed_matching`]: the ETOM graph metric. Among all maximum matchings it finds one
//!   with the most *correctly placed* calls (every dependency matched to a call in an
//!   earlier group). Greedy first-fit, as the published evaluator uses, can miss nodes
//!   when one tool serves several nodes; we search exactly instead.

/// Maximum matching size; `cand[p]` lists the right-side indices left item `p` may take.
pub fn max_matching(cand: &[Vec<usize>], right: usize) -> usize {
    max_matching_assign(cand, right).iter().filter(|a| a.is_some()).count()
}

/// Maximum matching with the assignment of each left item.
pub fn max_matching_assign(cand: &[Vec<usize>], right: usize) -> Vec<Option<usize>> {
    let mut owner: Vec<Option<usize>> = vec![None; right];
    let mut seen = vec![usize::MAX; right];
    for p in 0..cand.len() {
        augment(p, p, cand, &mut owner, &mut seen);
    }
    let mut assign = vec![None; cand.len()];
    for (n, o) in owner.iter().enumerate() {
        if let Some(p) = o {
            assign[*p] = Some(n);
        }
    }
    assign
}

fn augment(p: usize, stamp: usize, cand: &[Vec<usize>], owner: &mut [Option<usize>], seen: &mut [usize]) -> bool {
    for &n in &cand[p] {
        if seen[n] == stamp {
            continue;
        }
        seen[n] = stamp;
        let free = match owner[n] {
            None => true,
            Some(q) => augment(q, stamp, cand, owner, seen),
        };
        if free {
            owner[n] = Some(p);
            return true;
        }
    }
    false
}

/// Result of the placement-aware matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Node matched by each prediction.
    pub assign: Vec<Option<usize>>,
    /// Whether each prediction is matched and correctly placed.
    pub placed: Vec<bool>,
    pub matched: usize,
    pub correctly_placed: usize,
    /// The exact search hit its budget; the result is the best found, not proven optimal.
    pub truncated: bool,
}

/// Search budget (visited search states) before settling for the best matching found.
const BUDGET: usize = 200_000;

/// Match predictions (`cand[p]` = nodes prediction `p` can serve, `group[p]` = its step)
/// to nodes with dependencies `deps[n]`: maximise matched nodes, then correctly placed calls.
pub fn placed_matching<D: AsRef<[usize]>>(cand: &[Vec<usize>], group: &[i64], deps: &[D]) -> Placement {
    let nodes = deps.len();
    let preds = cand.len();
    let best_size = max_matching(cand, nodes);
    // Process predictions in step order: placement of a call depends only on the steps
    // already assigned, so it is known the moment the call is assigned.
    let mut order: Vec<usize> = (0..preds).collect();
    order.sort_by_key(|&p| group[p]);

    // Fast path: no ambiguity (each prediction has at most one node, each node at most one
    // prediction) means the matching is forced.
    let mut node_cands = vec![0usize; nodes];
    for c in cand {
        for &n in c {
            node_cands[n] += 1;
        }
    }
    let forced = cand.iter().all(|c| c.len() <= 1) && node_cands.iter().all(|&k| k <= 1);
    if forced {
        let assign: Vec<Option<usize>> = cand.iter().map(|c| c.first().copied()).collect();
        return evaluate(assign, group, deps, false);
    }

    let mut s = Search {
        cand,
        group,
        deps,
        order: &order,
        target: best_size,
        node_group: vec![None; nodes],
        assign: vec![None; preds],
        best: None,
        steps: 0,
        // Suffix counts of predictions with any candidate: an upper bound on what is left.
        matchable_after: {
            let mut v = vec![0usize; preds + 1];
            for i in (0..preds).rev() {
                v[i] = v[i + 1] + usize::from(!cand[order[i]].is_empty());
            }
            v
        },
    };
    s.dfs(0, 0, 0);
    match s.best {
        Some((_, assign)) => evaluate(assign, group, deps, s.steps >= BUDGET),
        None => evaluate(max_matching_assign(cand, nodes), group, deps, true),
    }
}

struct Search<'a, D> {
    cand: &'a [Vec<usize>],
    group: &'a [i64],
    deps: &'a [D],
    order: &'a [usize],
    target: usize,
    node_group: Vec<Option<i64>>,
    assign: Vec<Option<usize>>,
    best: Option<(usize, Vec<Option<usize>>)>,
    steps: usize,
    matchable_after: Vec<usize>,
}

impl<D: AsRef<[usize]>> Search<'_, D> {
    fn dfs(&mut self, i: usize, matched: usize, placed: usize) {
        self.steps += 1;
        if self.steps >= BUDGET {
            return;
        }
        if matched + self.matchable_after[i] < self.target {
            return;
        }
        if let Some((best_placed, _)) = &self.best
            && placed + self.matchable_after[i] <= *best_placed
        {
            return;
        }
        if i == self.order.len() {
            // matched == target here (the bound above guarantees it).
            self.best = Some((placed, self.assign.clone()));
            return;
        }
        let p = self.order[i];
        let g = self.group[p];
        for k in 0..self.cand[p].len() {
            let n = self.cand[p][k];
            if self.node_group[n].is_some() {
                continue;
            }
            let ok = self.deps[n].as_ref().iter().all(|&d| matches!(self.node_group[d], Some(dg) if dg < g));
            self.node_group[n] = Some(g);
            self.assign[p] = Some(n);
            self.dfs(i + 1, matched + 1, placed + usize::from(ok));
            self.node_group[n] = None;
            self.assign[p] = None;
        }
        self.dfs(i + 1, matched, placed);
    }
}

fn evaluate<D: AsRef<[usize]>>(assign: Vec<Option<usize>>, group: &[i64], deps: &[D], truncated: bool) -> Placement {
    let mut node_group: Vec<Option<i64>> = vec![None; deps.len()];
    for (p, a) in assign.iter().enumerate() {
        if let Some(n) = a {
            node_group[*n] = Some(group[p]);
        }
    }
    let placed: Vec<bool> = assign
        .iter()
        .enumerate()
        .map(|(p, a)| match a {
            Some(n) => deps[*n].as_ref().iter().all(|&d| matches!(node_group[d], Some(dg) if dg < group[p])),
            None => false,
        })
        .collect();
    Placement {
        matched: assign.iter().filter(|a| a.is_some()).count(),
        correctly_placed: placed.iter().filter(|&&b| b).count(),
        assign,
        placed,
        truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maximum_not_greedy() {
        // Prediction 0 fits nodes 0 and 1, prediction 1 only node 0: greedy first-fit would
        // give 0→0 and leave prediction 1 unmatched.
        let cand = vec![vec![0, 1], vec![0]];
        assert_eq!(max_matching(&cand, 2), 2);
        let p = placed_matching(&cand, &[0, 1], &[vec![], vec![]]);
        assert_eq!(p.matched, 2);
        assert_eq!(p.correctly_placed, 2);
    }

    #[test]
    fn prefers_the_matching_that_places_dependents() {
        // Nodes: A(0), D(1) needs A, E(2) needs D, F(3) needs D.
        // Predictions in steps: D, E, F, A, D. Taking the first D misplaces only D;
        // taking the last D misplaces E and F.
        let deps = vec![vec![], vec![0], vec![1], vec![1]];
        let cand = vec![vec![1], vec![2], vec![3], vec![0], vec![1]];
        let p = placed_matching(&cand, &[0, 1, 2, 3, 4], &deps);
        assert_eq!(p.matched, 4);
        assert_eq!(p.correctly_placed, 3);
        assert_eq!(p.assign[0], Some(1));
    }

    #[test]
    fn same_step_is_not_earlier() {
        let deps = vec![vec![], vec![0]];
        let cand = vec![vec![0], vec![1]];
        let p = placed_matching(&cand, &[0, 0], &deps);
        assert_eq!((p.matched, p.correctly_placed), (2, 1));
        let p = placed_matching(&cand, &[0, 1], &deps);
        assert_eq!((p.matched, p.correctly_placed), (2, 2));
    }
}

//! Issue 28: ground truth that matches the request. Planted samples of each defect (an
//! unrequested action, a repeated call, an argument from an unrelated result, an
//! unfaithful answer, an answer that names more acts than the plan made, a repeated
//! dialogue turn, an empty-plan action turn) go through the validation candidate's checks
//! and are pruned or rejected with their reasons; a clean sample passes unchanged. (The
//! copied-description queries of the levels are in the `levels` unit tests; the CLI run
//! with an agent that makes extra calls is
//! `synth::an_agent_s_extra_calls_leave_the_reference_plan_which_equals_the_sampled_chain`.)

use std::collections::BTreeMap;

use benchgen::agent::{CallRecord, ChainStep, RunStatus, Trajectory, check_chain};
use benchgen::mcp::{CallOutcome, ToolOutput};
use benchgen::model::RecordedCall;
use benchgen::synth::chains::ChainRecord;
use benchgen::synth::gold::{AnswerAgain, Asked, NeedCheck, Review, settle_answer, unfaithful};
use benchgen::synth::roleplay::{Dialogue, DialogueTurn};
use benchgen::synth::validate::{Candidate, from_chain, from_dialogue};
use serde_json::{Value, json};

fn call(index: usize, group: usize, tool: &str, args: Value, result: Value) -> CallRecord {
    CallRecord {
        index,
        group,
        call_id: format!("c{index}"),
        function: tool.into(),
        tool_id: Some(format!("ops::{tool}")),
        server: Some("ops".into()),
        arguments: args,
        executed: true,
        outcome: CallOutcome::Ok { output: ToolOutput::note(&result.to_string()) },
        exchange: None,
        call_hash: String::new(),
    }
}

/// A chain candidate: the sampled chain `tools`, its query, the agent's calls and answer.
fn chain(query: &str, tools: &[&str], calls: Vec<CallRecord>, answer: &str) -> Candidate {
    let ids: Vec<String> = tools.iter().map(|t| format!("ops::{t}")).collect();
    let steps: Vec<ChainStep> = benchgen::synth::chains::chain_steps(&ids);
    let t = Trajectory {
        id: "chain-planted".into(),
        query: query.into(),
        status: RunStatus::Answered,
        reason: None,
        answer: Some(answer.into()),
        messages: vec![],
        groups: calls.iter().map(|c| c.group + 1).max().unwrap_or(0),
        chain_check: Some(check_chain(&steps, &calls)),
        calls,
        chain: steps,
        exchanges: vec![],
        withheld: vec![],
    };
    let rec = ChainRecord {
        id: "chain-planted".into(),
        sub_scenario: "Ops-Alerts".into(),
        pair: (ids[0].clone(), ids[ids.len() - 1].clone()),
        tools: ids,
        seeds: vec![],
        query: query.into(),
        exchange: "h".into(),
    };
    from_chain(&rec, Some(&t), "synth")
}

/// The checks of `validate` without its LLM: the rules must decide every call (a call
/// left to the LLM check fails the test unless `llm` answers it).
fn check(c: Candidate, llm: &[(&str, bool)]) -> Candidate {
    check_with(c, llm, &BTreeMap::new())
}

/// [`check`] with the tools' descriptions by name (the log catalog's).
fn check_with(mut c: Candidate, llm: &[(&str, bool)], about: &BTreeMap<String, String>) -> Candidate {
    assert!(c.reasons.is_empty(), "the planted sample passes the automatic checks: {:?}", c.reasons);
    let (review, open) = Review::start(&c, about);
    let mut checks = BTreeMap::new();
    for o in &open {
        let (_, needed) = llm
            .iter()
            .find(|(k, _)| o.key.ends_with(k))
            .unwrap_or_else(|| panic!("the rules left `{}` open: {}", o.key, o.vars));
        let value = NeedCheck { needed: *needed, reason: "planted LLM verdict".into() };
        checks.insert(o.key.clone(), Asked { value, exchange: "sha256:x".into(), event: None });
    }
    review.settle(&mut c, &checks, &BTreeMap::new(), &BTreeMap::new(), &benchgen::synth::gold::KnownValues::default());
    c
}

fn plan(c: &Candidate, turn: usize) -> Vec<String> {
    c.sample.turns[turn].reference_plan.iter().map(|p| p.alternatives[0].replace("ops::", "")).collect()
}

fn left_out(c: &Candidate) -> Vec<(String, String)> {
    c.sample
        .turns
        .iter()
        .flat_map(|t| t.trajectory.iter().flatten())
        .filter_map(|r: &RecordedCall| Some((r.tool.replace("ops::", ""), r.left_out.clone()?)))
        .collect()
}

#[test]
fn an_unrequested_action_is_left_out_of_the_plan_and_its_result_stays_recorded() {
    // chain-a2b4d34d7b of the demo release: find the on-call person and e-mail them; the
    // agent also acknowledged an "alert" whose id is the notification's own result id.
    let c = chain(
        "Find the database team's on-call person and e-mail them",
        &["get_oncall", "notify_user"],
        vec![
            call(
                0,
                0,
                "get_oncall",
                json!({"team": "database"}),
                json!({"name": "Dana", "email": "dana@corp.example"}),
            ),
            call(1, 1, "notify_user", json!({"email": "dana@corp.example"}), json!({"result_id": "N-9"})),
            call(2, 2, "acknowledge_alert", json!({"alert_id": "N-9"}), json!({"ok": true})),
        ],
        "I e-mailed Dana (dana@corp.example), the database team's on-call person.",
    );
    let c = check(c, &[]);
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(plan(&c, 0), ["get_oncall", "notify_user"]);
    let left = left_out(&c);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, "acknowledge_alert");
    assert!(left[0].1.starts_with("unrequested: `acknowledge_alert` is an action (acknowledge)"), "{left:?}");
    assert_eq!(c.sample.turns[0].reference_plan[1].depends_on, vec![0], "the e-mail comes from get_oncall's result");
    let l = benchgen::synth::validate::labels(&c.sample, &c.sub_scenario);
    assert_eq!((l.tool_calls, l.groups), (2, 2), "labels count the plan, not the run");
    // The decision is recorded with who made it.
    let d: Vec<String> = c.decisions.iter().map(|d| format!("{} {:?}", d.tool, d.decision)).collect();
    assert_eq!(d, ["ops::get_oncall Needed", "ops::notify_user Needed", "ops::acknowledge_alert Unrequested"]);
}

/// The demo catalog's descriptions of the two incident reads.
fn incident_tools() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "search_incidents".to_string(),
            "Search incidents by free text and status; returns incident ids, titles and services.".to_string(),
        ),
        (
            "get_incident".to_string(),
            "Full details of one incident: timeline, affected service, severity, assignee.".to_string(),
        ),
    ])
}

fn incident_calls() -> Vec<CallRecord> {
    vec![
        call(
            0,
            0,
            "search_incidents",
            json!({"query": "slow checkout", "status": "open"}),
            json!({"incidents": [{"id": "INC-4821", "title": "Checkout latency", "service": "checkout"}]}),
        ),
        call(
            1,
            1,
            "get_incident",
            json!({"incident_id": "INC-4821"}),
            json!({"id": "INC-4821", "service": "checkout", "severity": "SEV2", "assignee": "dana", "timeline": []}),
        ),
    ]
}

#[test]
fn a_lookup_that_adds_nothing_the_request_names_is_unrequested_by_rule_whatever_the_judge_says() {
    use benchgen::synth::gold::{By, Decision};
    // The demo of 2026-12-06 released this chain: its query is answered by the search, and
    // the 0.5B (and the 1.5B, asked by hand) judge said `get_incident` was needed. The
    // search is needed by rule (the answer quotes the id the request asks about) and the
    // lookup is decided by rule: `check_with` panics on a call the rules leave open that
    // the planted verdicts do not answer, and none is planted for it.
    let c = chain(
        "Find open incidents about slow checkout",
        &["search_incidents", "get_incident"],
        incident_calls(),
        "INC-4821 (Checkout latency) is open.",
    );
    let c = check_with(c, &[], &incident_tools());
    assert_eq!(
        c.reasons,
        [
            "turn 1: call 2 `get_incident`, a step of the sampled chain, only looks up again what call 1 `search_incidents` found (its `incidents[0].id`), and the request names nothing it adds (severity, assignee, timeline, full, details, affected)"
        ]
    );
    let d = &c.decisions[1];
    assert_eq!((d.decision, d.by), (Decision::Unrequested, By::Rule));

    // A request that names what the lookup adds, as a word of its own or a related one,
    // leaves it to the judge (here: needed).
    for query in [
        "Find open incidents about slow checkout and tell me their severity",
        "How severe are the open incidents about slow checkout?",
        "Find open incidents about slow checkout and show their details",
    ] {
        let c = chain(query, &["search_incidents", "get_incident"], incident_calls(), "INC-4821 is open.");
        let c = check_with(c, &[(":1.1", true), (":1.2", true)], &incident_tools());
        assert!(c.reasons.is_empty(), "{query}: {:?}", c.reasons);
        assert_eq!(plan(&c, 0), ["search_incidents", "get_incident"], "{query}");
        assert_eq!(c.decisions[1].by, By::Llm, "{query}");
    }
    // Without the tool's description the rule cannot tell what it brings: the judge decides.
    let c = chain(
        "Find open incidents about slow checkout",
        &["search_incidents", "get_incident"],
        incident_calls(),
        "INC-4821 is open.",
    );
    let c = check_with(c, &[(":1.1", true), (":1.2", true)], &BTreeMap::new());
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(c.decisions[1].by, By::Llm);
}

#[test]
fn an_answer_quoting_a_lookup_the_reference_leaves_out_is_asked_again_once_then_kept_or_rejected() {
    // The demo's incident dialogue (2026-12-06): the lookup is left out by rule, and the
    // answer reported what only it had found ("… has a severity of high").
    let search = recorded(
        "search_incidents",
        json!({"query": "slow checkout", "status": "open"}),
        json!({"incidents": [{"id": "INC-4821", "title": "Checkout latency", "service": "checkout"}]}),
    );
    let lookup = recorded(
        "get_incident",
        json!({"incident_id": "INC-4821"}),
        json!({"id": "INC-4821", "service": "checkout", "severity": "SEV2", "assignee": "dana", "timeline": []}),
    );
    let assign = recorded("assign_incident", json!({"incident_id": "INC-4821", "team": "sre"}), json!({"ok": true}));
    let c = dialogue(vec![
        (
            "Find open incidents about slow checkout",
            vec![search, lookup],
            "The open incident about slow checkout is INC-4821; its assignee is Dana.",
        ),
        ("Assign it to sre", vec![assign], "INC-4821 is assigned to sre."),
    ]);
    let c = check_with(c, &[], &incident_tools());
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(plan(&c, 0), ["search_incidents"]);
    let found = unfaithful(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    let (_, claims, vars) = &found[0];
    assert_eq!(claims[..], ["quotes `dana`, the `assignee` of `get_incident`, a call left out as not needed"]);
    assert_eq!(vars["calls"].as_array().unwrap().len(), 1, "the re-ask shows the plan's call only");
    let asked =
        |answer: &str| Asked { value: AnswerAgain { answer: answer.into() }, exchange: "x".into(), event: None };
    let mut kept = c.clone();
    settle_answer(&mut kept, 0, claims, Ok(&asked("INC-4821 (Checkout latency) is open.")));
    assert!(kept.reasons.is_empty(), "{:?}", kept.reasons);
    let mut rejected = c.clone();
    settle_answer(&mut rejected, 0, claims, Ok(&asked("INC-4821 is open; Dana is the assignee.")));
    assert_eq!(rejected.reasons.len(), 1, "{:?}", rejected.reasons);
    assert!(rejected.reasons[0].contains("asked again once: quotes `dana`"), "{:?}", rejected.reasons);
    // A value the kept search found too (the service), or one whose field the answer does
    // not name, is no such quote.
    for answer in ["INC-4821 is open on checkout.", "INC-4821 is open; Dana handles it."] {
        let mut clean = c.clone();
        clean.sample.turns[0].gold_reply = Some(answer.into());
        assert!(unfaithful(&clean).is_empty(), "{answer}");
    }
    // An earlier turn's left-out lookup is no source for a later answer either.
    let mut later = c;
    later.sample.turns[0].gold_reply = Some("INC-4821 is open.".into());
    later.sample.turns[1].gold_reply = Some("INC-4821 is assigned to sre; its assignee was Dana.".into());
    let found = unfaithful(&later);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 1);
}

#[test]
fn a_repeated_call_is_left_out_and_a_read_after_an_action_goes_to_the_llm_check() {
    // chain-963ddb8bdf: get_alerts, acknowledge ×2, then get_alerts again.
    let alerts = json!({"alerts": [{"id": "A-1"}, {"id": "A-2"}]});
    let c = chain(
        "Find all open alerts on gateway and acknowledge them",
        &["get_alerts", "acknowledge_alert"],
        vec![
            call(0, 0, "get_alerts", json!({"service": "gateway"}), alerts.clone()),
            call(1, 1, "get_alerts", json!({"service": "gateway"}), alerts.clone()),
            call(2, 2, "acknowledge_alert", json!({"alert_id": "A-1"}), json!({"ok": true})),
            call(3, 2, "acknowledge_alert", json!({"alert_id": "A-2"}), json!({"ok": true})),
            call(4, 3, "get_alerts", json!({"service": "gateway"}), json!({"alerts": []})),
        ],
        "I acknowledged both alerts on gateway: A-1 and A-2.",
    );
    let c = check(c, &[(":1.5", false)]);
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(plan(&c, 0), ["get_alerts", "acknowledge_alert", "acknowledge_alert"]);
    let left = left_out(&c);
    assert_eq!(left[0], ("get_alerts".to_string(), "repeated: the same call and result as call 1: nothing new".into()));
    assert_eq!(left[1], ("get_alerts".to_string(), "unrequested: planted LLM verdict".into()));
    assert_eq!(c.decisions[4].by, benchgen::synth::gold::By::Llm);
    // Both acknowledgements run in parallel after the read: one group, depending on it.
    let p = &c.sample.turns[0].reference_plan;
    assert_eq!((p[1].group, p[2].group), (1, 1));
    assert_eq!((p[1].depends_on.clone(), p[2].depends_on.clone()), (vec![0], vec![0]));
}

#[test]
fn an_argument_from_an_unrelated_result_or_from_nowhere_rejects_the_sample_naming_call_and_argument() {
    // The request does ask for the acknowledgement, but the alert id is the notification's.
    let c = chain(
        "Find the on-call person of the database team, e-mail them and acknowledge the alert",
        &["get_oncall", "notify_user", "acknowledge_alert"],
        vec![
            call(0, 0, "get_oncall", json!({"team": "database"}), json!({"email": "dana@corp.example"})),
            call(1, 1, "notify_user", json!({"email": "dana@corp.example"}), json!({"result_id": "N-9"})),
            call(2, 2, "acknowledge_alert", json!({"alert_id": "N-9"}), json!({"ok": true})),
        ],
        "Done.",
    );
    let c = check(c, &[]);
    assert_eq!(
        c.reasons,
        [
            "turn 1: argument `alert_id` = \"N-9\" of call 3 `acknowledge_alert` is taken from an unrelated result: call 2 `notify_user` returned it as `result_id`"
        ]
    );
    // An id the request, the results and the defaults do not hold: made up.
    let c = chain(
        "Show incident details for the payments outage",
        &["search_incidents", "get_incident"],
        vec![
            call(
                0,
                0,
                "search_incidents",
                json!({"query": "payments outage"}),
                json!({"incidents": [{"id": "INC-1"}]}),
            ),
            call(1, 1, "get_incident", json!({"incident_id": "INC-77"}), json!({"id": "INC-77"})),
        ],
        "Here are the details.",
    );
    // The chain's steps have no evidence here (the answer quotes nothing): the LLM check
    // decides them (validate v7), and finds both needed.
    let c = check(c, &[(":1.1", true), (":1.2", true)]);
    assert_eq!(c.reasons.len(), 1, "{:?}", c.reasons);
    assert!(c.reasons[0].contains("argument `incident_id` = \"INC-77\" of call 2 `get_incident` comes from nowhere"));
}

#[test]
fn an_answer_that_claims_what_no_call_did_is_asked_again_once_then_kept_or_rejected() {
    let planted = || {
        chain(
            "Find open incidents about payment errors",
            &["search_incidents", "get_incident"],
            vec![
                call(
                    0,
                    0,
                    "search_incidents",
                    json!({"query": "payment errors", "status": "open"}),
                    json!({"incidents": [{"id": "INC-5"}]}),
                ),
                call(
                    1,
                    1,
                    "get_incident",
                    json!({"incident_id": "INC-5"}),
                    json!({"id": "INC-5", "title": "payment errors"}),
                ),
                call(2, 2, "acknowledge_alert", json!({"alert_id": "INC-5"}), json!({"ok": true})),
            ],
            "INC-5 is open, and I acknowledged it.",
        )
    };
    // The details step has no evidence (the answer quotes nothing new): the LLM check's.
    let c = check(planted(), &[(":1.1", true), (":1.2", true)]);
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    let found = unfaithful(&c);
    assert_eq!(found.len(), 1);
    let (turn, claims, vars) = &found[0];
    assert_eq!(*turn, 0);
    assert!(claims[0].contains("says `acknowledged`, and no call of the turn did that"), "{claims:?}");
    assert_eq!(vars["calls"].as_array().unwrap().len(), 2, "the re-ask shows the plan's calls only");
    // A faithful second answer is kept, with a note.
    let mut kept = c.clone();
    let good = Asked {
        value: AnswerAgain { answer: "INC-5 is open (payment errors).".into() },
        exchange: "x".into(),
        event: None,
    };
    settle_answer(&mut kept, 0, claims, Ok(&good));
    assert!(kept.reasons.is_empty());
    assert_eq!(kept.sample.turns[0].gold_reply.as_deref(), Some("INC-5 is open (payment errors)."));
    assert!(kept.notes[0].starts_with("turn 1: the answer was asked again (says `acknowledged`"), "{:?}", kept.notes);
    // A second answer that still claims it: rejected with both findings.
    let mut rejected = c.clone();
    let bad =
        Asked { value: AnswerAgain { answer: "I acknowledged INC-5.".into() }, exchange: "x".into(), event: None };
    settle_answer(&mut rejected, 0, claims, Ok(&bad));
    assert_eq!(rejected.reasons.len(), 1);
    assert!(
        rejected.reasons[0].contains("the answer is not supported by its calls")
            && rejected.reasons[0].contains("asked again once")
    );
    // A clean answer needs no re-ask.
    let mut clean = c;
    clean.sample.turns[0].gold_reply = Some("INC-5 is open: payment errors.".into());
    assert!(unfaithful(&clean).is_empty());
}

#[test]
fn an_answer_that_names_more_acts_than_the_plan_made_is_asked_again_once_then_kept_or_rejected() {
    // chain-963ddb8bdf of the demo release: two acknowledgements, and an answer that claims
    // three, naming one id twice.
    let planted = || {
        chain(
            "Find all open alerts on gateway and acknowledge them",
            &["get_alerts", "acknowledge_alert"],
            vec![
                call(
                    0,
                    0,
                    "get_alerts",
                    json!({"service": "gateway"}),
                    json!({"alerts": [{"id": "469aa735"}, {"id": "34e663dc"}]}),
                ),
                call(1, 1, "acknowledge_alert", json!({"alert_id": "469aa735"}), json!({"ok": true})),
                call(2, 1, "acknowledge_alert", json!({"alert_id": "34e663dc"}), json!({"ok": true})),
            ],
            "I acknowledged the alerts with IDs 469aa735, 34e663dc, and 34e663dc.",
        )
    };
    let c = check(planted(), &[]);
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(plan(&c, 0), ["get_alerts", "acknowledge_alert", "acknowledge_alert"]);
    let found = unfaithful(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    let (turn, claims, vars) = &found[0];
    assert_eq!(*turn, 0);
    assert_eq!(
        claims,
        &["claims 3 acknowledgements (ids 469aa735, 34e663dc, 34e663dc) but the plan made 2; \
           id 34e663dc is named twice but acted on once"]
    );
    assert_eq!(vars["problems"], json!(claims), "the re-ask is told what was wrong");
    // A faithful second answer is kept, with a note.
    let mut kept = c.clone();
    let good = Asked {
        value: AnswerAgain { answer: "I acknowledged the alerts with IDs 469aa735 and 34e663dc.".into() },
        exchange: "x".into(),
        event: None,
    };
    settle_answer(&mut kept, 0, claims, Ok(&good));
    assert!(kept.reasons.is_empty(), "{:?}", kept.reasons);
    assert_eq!(
        kept.sample.turns[0].gold_reply.as_deref(),
        Some("I acknowledged the alerts with IDs 469aa735 and 34e663dc.")
    );
    let note = &kept.notes[0];
    assert!(note.starts_with("turn 1: the answer was asked again (claims 3 acknowledgements"), "{note}");
    // A second answer that still claims three: rejected with both findings.
    let mut rejected = c.clone();
    let bad = Asked {
        value: AnswerAgain { answer: "Three alerts acknowledged: 469aa735, 34e663dc and 34e663dc.".into() },
        exchange: "x".into(),
        event: None,
    };
    settle_answer(&mut rejected, 0, claims, Ok(&bad));
    assert_eq!(rejected.reasons.len(), 1, "{:?}", rejected.reasons);
    let r = &rejected.reasons[0];
    assert!(r.starts_with("turn 1: the answer is not supported by its calls: claims 3 acknowledgements"), "{r}");
    let again = "(asked again once: says 3 acknowledged, and 2 call(s) of the turn did that; claims 3 acknowledgements";
    assert!(r.contains(again), "{r}");
    assert_eq!(rejected.sample.turns[0].gold_reply, c.sample.turns[0].gold_reply, "the first answer stays");
    // A dialogue turn goes through the same check: an id named twice after two acts.
    let open = json!({"alerts": [{"id": "A-1"}, {"id": "A-2"}]});
    let alerts = recorded("get_alerts", json!({"service": "gateway"}), open);
    let ack = |id: &str| recorded("acknowledge_alert", json!({"alert_id": id}), json!({"ok": true}));
    let d = dialogue(vec![
        ("Which alerts are open on gateway?", vec![alerts], "A-1 and A-2 are open."),
        ("Acknowledge both, please", vec![ack("A-1"), ack("A-2")], "I acknowledged A-1, A-2 and A-2."),
    ]);
    let d = check(d, &[]);
    assert!(d.reasons.is_empty(), "{:?}", d.reasons);
    let found = unfaithful(&d);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 1);
    assert_eq!(
        found[0].1,
        ["claims 3 acknowledgements (ids A-1, A-2, A-2) but the plan made 2; id A-2 is named twice but acted on once"]
    );
}

#[test]
fn a_clean_sample_passes_unchanged() {
    let c = chain(
        "Roll back the last notifications deployment",
        &["list_deployments", "rollback_deployment"],
        vec![
            call(
                0,
                0,
                "list_deployments",
                json!({"service": "notifications"}),
                json!({"deployments": [{"id": "DEP-5140"}]}),
            ),
            call(1, 1, "rollback_deployment", json!({"deployment_id": "DEP-5140"}), json!({"ok": true})),
        ],
        "DEP-5140 was rolled back.",
    );
    let before = c.sample.clone();
    let c = check(c, &[]);
    assert!(c.reasons.is_empty() && c.notes.is_empty(), "{:?} {:?}", c.reasons, c.notes);
    assert!(left_out(&c).is_empty());
    assert_eq!(c.sample.turns, before.turns, "plan, trajectory and answer as they were");
    assert!(unfaithful(&c).is_empty());
}

fn recorded(tool: &str, args: Value, result: Value) -> RecordedCall {
    RecordedCall {
        tool: format!("ops::{tool}"),
        arguments: args,
        result: Some(result.to_string()),
        error: None,
        left_out: None,
    }
}

fn dialogue(turns: Vec<(&str, Vec<RecordedCall>, &str)>) -> Candidate {
    let d = Dialogue {
        id: "dialog-planted".into(),
        sub_scenario: "Ops-Alerts".into(),
        persona: BTreeMap::new(),
        goal: "g".into(),
        requests: vec![],
        goal_exchange: "h".into(),
        turns: turns
            .into_iter()
            .map(|(user, calls, answer)| DialogueTurn {
                user: user.into(),
                user_exchange: "h".into(),
                status: RunStatus::Answered,
                reason: None,
                answer: Some(answer.into()),
                hint: None,
                answer_asked_again: None,
                withheld: vec![],
                groups: if calls.is_empty() { vec![] } else { vec![calls] },
            })
            .collect(),
        ended: "cap".into(),
        withheld_in_dropped_tries: vec![],
    };
    from_dialogue(&d, "synth")
}

#[test]
fn a_dialogue_turn_that_repeats_or_asks_for_an_action_without_a_call_ends_the_dialogue() {
    let alerts = || recorded("get_alerts", json!({"service": "gateway"}), json!({"alerts": [{"id": "A-1"}]}));
    let ack = || recorded("acknowledge_alert", json!({"alert_id": "A-1"}), json!({"ok": true}));
    let assign =
        || recorded("assign_incident", json!({"incident_id": "INC-2", "team": "payments"}), json!({"ok": true}));
    // dialog-fac40cb4e2: turn 3 repeats turn 1 and claims the work again without a call.
    let c = dialogue(vec![
        ("Which alerts are open on gateway?", vec![alerts()], "A-1 is open."),
        ("Acknowledge A-1, please", vec![ack()], "A-1 is acknowledged."),
        ("which alerts are open on gateway?", vec![], "A-1 is open."),
    ]);
    let c = check(c, &[]);
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(c.sample.turns.len(), 2, "the dialogue ends before the repeated turn");
    assert_eq!(c.notes, ["the dialogue ends before turn 3: turn 3 repeats turn 1"]);
    // An action asked for with an empty reference plan, at turn 2: fewer than two turns remain.
    let c = dialogue(vec![
        ("Which alerts are open on gateway?", vec![alerts()], "A-1 is open."),
        ("Now assign INC-2 to the payments team", vec![], "Done, it is assigned."),
    ]);
    let c = check(c, &[]);
    assert_eq!(
        c.reasons,
        ["turn 2 asks for an action (assign) and its reference plan is empty; fewer than two turns remain before it"]
    );
    // The same turn with its call: the dialogue stands, and turn 2's id comes from its request.
    let c = dialogue(vec![
        ("Which alerts are open on gateway?", vec![alerts()], "A-1 is open."),
        ("Now assign INC-2 to the payments team", vec![assign()], "INC-2 is assigned to payments."),
    ]);
    let c = check(c, &[]);
    assert!(c.reasons.is_empty() && c.notes.is_empty(), "{:?} {:?}", c.reasons, c.notes);
    assert_eq!(plan(&c, 1), ["assign_incident"]);
}

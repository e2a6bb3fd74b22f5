//! Seeded generator of the demo's tool logs for an IT-operations assistant (a domain of
//! our own, not finance): `raw/demo/logs/catalog.json` (MCP `tools/list`, 20 tools),
//! `raw/demo/logs/events.jsonl` (generic event log) and `raw/demo/logs/chats.jsonl`
//! (OpenAI chat messages). Same seed → same bytes; the output is committed.
//!
//! Usage: `cargo run --example gen_demo_logs -- [--out DIR] [--sessions N] [--chats N]
//! [--seed S] [--bench CALLS]`. `--bench CALLS` writes only `events.jsonl`, every session
//! a chain of CALLS calls (the import benchmark's input, scripts/bench.d/40-logs.sh).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

const TOOLS: &[(&str, &str, &[&str])] = &[
    (
        "search_incidents",
        "Search incidents by free text and status; returns incident ids, titles and services.",
        &["query", "status"],
    ),
    ("get_incident", "Full details of one incident: timeline, affected service, severity, assignee.", &["incident_id"]),
    (
        "create_incident",
        "Open a new incident for a service with a title and severity.",
        &["title", "severity", "service"],
    ),
    ("update_incident", "Change an incident's status or add a note.", &["incident_id", "status", "note"]),
    ("assign_incident", "Assign an incident to a team.", &["incident_id", "team"]),
    ("list_services", "List the monitored services with their owners.", &[]),
    ("get_service_status", "Current health of a service: up, degraded or down, with error rate.", &["service"]),
    ("get_service_dependencies", "The services a service calls (its upstream dependencies).", &["service"]),
    (
        "query_metrics",
        "Time series of a metric (latency_p99, error_rate, cpu, memory) of a service.",
        &["service", "metric", "window"],
    ),
    ("search_logs", "Search a service's logs for a text over a time window.", &["service", "query", "window"]),
    ("get_alerts", "Open alerts of a service, with alert ids and severity.", &["service", "severity"]),
    ("acknowledge_alert", "Acknowledge an alert so it stops paging.", &["alert_id"]),
    ("get_host_info", "Host details: IP address, OS, rack, services running.", &["hostname"]),
    ("ping_host", "Check that a host answers on the network; returns round-trip time.", &["ip"]),
    ("restart_service", "Restart a service on one host.", &["service", "host"]),
    ("list_deployments", "Recent deployments of a service with deployment ids and versions.", &["service"]),
    ("rollback_deployment", "Roll a deployment back to the previous version.", &["deployment_id"]),
    ("get_oncall", "Who is on call for a team now, with contact e-mail and phone.", &["team"]),
    ("notify_user", "Send a message to a person by e-mail.", &["email", "message"]),
    ("get_runbook", "The runbook for a topic (how to handle a known problem).", &["topic"]),
];

const SERVICES: &[&str] =
    &["payments", "checkout", "search", "auth", "inventory", "notifications", "billing", "gateway"];
const TEAMS: &[&str] = &["sre", "platform", "database", "network", "payments-dev"];
const METRICS: &[&str] = &["latency_p99", "error_rate", "cpu", "memory"];
const HOSTS: &[&str] = &["web-01", "web-02", "db-01", "cache-03", "worker-07"];

struct Gen {
    rng: ChaCha8Rng,
    t: i64,
    /// Foreign phone numbers planted so far (they rotate through fixed formats).
    phones: usize,
}

/// One call: tool, arguments, result or error, explicit group (or none).
struct C {
    tool: &'static str,
    args: Value,
    result: Option<Value>,
    error: Option<&'static str>,
}

fn c(tool: &'static str, args: Value, result: Value) -> C {
    C { tool, args, result: Some(result), error: None }
}

impl Gen {
    fn pick<'a>(&mut self, xs: &'a [&'a str]) -> &'a str {
        xs[self.rng.random_range(0..xs.len())]
    }
    fn id(&mut self, prefix: &str) -> String {
        format!("{prefix}-{}", self.rng.random_range(1000..9999))
    }
    /// A valid Luhn card number, a Chinese id with its check digit, a mobile, an IBAN.
    fn card(&mut self) -> String {
        let mut d: Vec<u32> = vec![4];
        for _ in 0..14 {
            d.push(self.rng.random_range(0..10));
        }
        let sum: u32 = d
            .iter()
            .rev()
            .enumerate()
            .map(|(i, &x)| {
                if i % 2 == 0 {
                    let y = x * 2;
                    if y > 9 { y - 9 } else { y }
                } else {
                    x
                }
            })
            .sum();
        d.push((10 - sum % 10) % 10);
        d.iter().map(|x| x.to_string()).collect()
    }
    fn cn_id(&mut self) -> String {
        let mut s = format!(
            "1101051{:03}{:02}{:02}",
            self.rng.random_range(960..999),
            self.rng.random_range(1..13),
            self.rng.random_range(10..29)
        );
        s.push_str(&format!("{:03}", self.rng.random_range(100..999)));
        const W: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
        let sum: u32 = s.bytes().zip(W).map(|(b, w)| (b - b'0') as u32 * w).sum();
        s.push(b"10X98765432"[(sum % 11) as usize] as char);
        s
    }
    fn mobile(&mut self) -> String {
        format!("13{}{:08}", self.rng.random_range(0..10), self.rng.random_range(0..100_000_000))
    }
    /// A Chinese mobile in one of the ways people write it, chosen by its last digit (not by
    /// a draw: the other data stays as it was before national formats were planted).
    fn mobile_written(&mut self) -> String {
        let m = self.mobile();
        match m.as_bytes()[10] % 4 {
            0 => m,
            1 => format!("{} {} {}", &m[..3], &m[3..7], &m[7..]),
            2 => format!("{}-{}-{}", &m[..3], &m[3..7], &m[7..]),
            _ => format!("+86 {m}"),
        }
    }
    /// A national-format number of another region, in turn (UK mobile and London, US, Japan,
    /// Germany, France, India), or the international one planted before.
    fn foreign_phone(&mut self) -> &'static str {
        const PHONES: [&str; 8] = [
            "+44 20 7946 0018",
            "07700 900123",
            "020 7946 0958",
            "(212) 555-0147",
            "03-1234-5678",
            "030 901820",
            "01 42 68 53 00",
            "098765 43210",
        ];
        self.phones += 1;
        PHONES[(self.phones - 1) % PHONES.len()]
    }
    fn email(&mut self) -> String {
        let names = ["li.wei", "anna.schmidt", "j.okafor", "maria.rossi", "chen.jing", "tom.baker"];
        format!("{}@{}", self.pick(&names), self.pick(&["example.com", "corp.example.org"]))
    }
    fn ip(&mut self) -> String {
        format!(
            "10.{}.{}.{}",
            self.rng.random_range(0..255),
            self.rng.random_range(0..255),
            self.rng.random_range(1..255)
        )
    }

    fn single(&mut self) -> (String, &'static str, Vec<Vec<C>>, String) {
        let svc = self.pick(SERVICES).to_string();
        match self.rng.random_range(0..10) {
            0 => (
                format!("Is the {svc} service healthy right now?"),
                "Infrastructure-Services",
                vec![vec![c(
                    "get_service_status",
                    json!({"service": svc}),
                    json!({"service": svc, "state": "up", "error_rate": 0.2}),
                )]],
                format!("{svc} is up with an error rate of 0.2%."),
            ),
            1 => {
                let m = self.pick(METRICS).to_string();
                (
                    format!("Show me {m} for {svc} over the last hour"),
                    "Monitoring-Metrics",
                    vec![vec![c(
                        "query_metrics",
                        json!({"service": svc, "metric": m, "window": "1h"}),
                        json!({"points": [12, 15, 11], "unit": "ms"}),
                    )]],
                    format!("{m} of {svc} stayed between 11 and 15 over the last hour."),
                )
            }
            2 => (
                format!("Any open alerts on {svc}?"),
                "Monitoring-Alerts",
                vec![vec![c("get_alerts", json!({"service": svc, "severity": "any"}), json!({"alerts": []}))]],
                format!("There are no open alerts on {svc}."),
            ),
            3 => {
                let q = self.pick(&["timeout", "OOM", "connection refused", "500"]).to_string();
                (
                    format!("Search the {svc} logs for '{q}' in the last 30 minutes"),
                    "IncidentManagement-Triage",
                    vec![vec![c(
                        "search_logs",
                        json!({"service": svc, "query": q, "window": "30m"}),
                        json!({"matches": 3}),
                    )]],
                    format!("Found 3 log lines matching '{q}' in {svc}."),
                )
            }
            4 => (
                format!("What does {svc} depend on?"),
                "Infrastructure-Services",
                vec![vec![c(
                    "get_service_dependencies",
                    json!({"service": svc}),
                    json!({"depends_on": ["auth", "gateway"]}),
                )]],
                format!("{svc} depends on auth and gateway."),
            ),
            5 => {
                let team = self.pick(TEAMS).to_string();
                (
                    format!("Who is on call for {team}?"),
                    "Support-OnCall",
                    vec![vec![c(
                        "get_oncall",
                        json!({"team": team}),
                        json!({"name": "Anna", "email": "anna.schmidt@example.com", "phone": "+44 20 7946 0958"}),
                    )]],
                    "Anna is on call (anna.schmidt@example.com, +44 20 7946 0958).".into(),
                )
            }
            6 => {
                let h = self.pick(HOSTS).to_string();
                let ip = self.ip();
                (
                    format!("Give me the details of host {h}"),
                    "Infrastructure-Hosts",
                    vec![vec![c(
                        "get_host_info",
                        json!({"hostname": h}),
                        json!({"hostname": h, "ip": ip, "os": "debian 12"}),
                    )]],
                    format!("{h} runs debian 12 at {ip}."),
                )
            }
            7 => (
                format!("Which versions of {svc} were deployed recently?"),
                "ChangeManagement-Deployments",
                vec![vec![c(
                    "list_deployments",
                    json!({"service": svc}),
                    json!({"deployments": [{"id": "DEP-4411", "version": "2.3.1"}]}),
                )]],
                format!("The latest {svc} deployment is DEP-4411 (2.3.1)."),
            ),
            8 => {
                let topic = self.pick(&["disk full", "certificate expiry", "database failover"]).to_string();
                (
                    format!("How do we handle {topic}?"),
                    "Support-OnCall",
                    vec![vec![c("get_runbook", json!({"topic": topic}), json!({"steps": ["check", "fix", "verify"]}))]],
                    format!("The runbook for {topic}: check, fix, verify."),
                )
            }
            _ => {
                let q = self.pick(&["login failures", "slow checkout", "payment errors"]).to_string();
                (
                    format!("Find open incidents about {q}"),
                    "IncidentManagement-Triage",
                    vec![vec![c(
                        "search_incidents",
                        json!({"query": q, "status": "open"}),
                        json!({"incidents": [{"id": "INC-2231", "title": q}]}),
                    )]],
                    format!("One open incident: INC-2231 ({q})."),
                )
            }
        }
    }

    fn multi(&mut self) -> (String, &'static str, Vec<Vec<C>>, String) {
        let svc = self.pick(SERVICES).to_string();
        match self.rng.random_range(0..7) {
            0 => {
                let inc = self.id("INC");
                let team = self.pick(TEAMS).to_string();
                (
                    format!("Find the open incident about {svc} errors and assign it to {team}"),
                    "IncidentManagement-Triage",
                    vec![
                        vec![c(
                            "search_incidents",
                            json!({"query": format!("{svc} errors"), "status": "open"}),
                            json!({"incidents": [{"id": inc, "service": svc}]}),
                        )],
                        vec![c("get_incident", json!({"incident_id": inc}), json!({"id": inc, "severity": "high"}))],
                        vec![c("assign_incident", json!({"incident_id": inc, "team": team}), json!({"ok": true}))],
                    ],
                    format!("{inc} is now assigned to {team}."),
                )
            }
            1 => (
                format!("{svc} feels slow: check its status and alerts, then its latency"),
                "Monitoring-Metrics",
                vec![
                    vec![
                        c("get_service_status", json!({"service": svc}), json!({"state": "degraded"})),
                        c(
                            "get_alerts",
                            json!({"service": svc, "severity": "high"}),
                            json!({"alerts": [{"id": "ALR-77"}]}),
                        ),
                    ],
                    vec![c(
                        "query_metrics",
                        json!({"service": svc, "metric": "latency_p99", "window": "1h"}),
                        json!({"points": [900, 1200]}),
                    )],
                ],
                format!("{svc} is degraded; p99 latency rose to 1.2 s."),
            ),
            2 => {
                let h = self.pick(HOSTS).to_string();
                let ip = self.ip();
                (
                    format!("{svc} on {h} is stuck: check the host is reachable and restart it"),
                    "Infrastructure-Hosts",
                    vec![
                        vec![c("get_host_info", json!({"hostname": h}), json!({"hostname": h, "ip": ip}))],
                        vec![c("ping_host", json!({"ip": ip}), json!({"rtt_ms": 0.4}))],
                        vec![c("restart_service", json!({"service": svc, "host": h}), json!({"ok": true}))],
                    ],
                    format!("{h} ({ip}) answers; {svc} was restarted."),
                )
            }
            3 => {
                let dep = self.id("DEP");
                let email = self.email();
                (
                    format!("Roll back the last {svc} deployment and tell {email}"),
                    "ChangeManagement-Deployments",
                    vec![
                        vec![c(
                            "list_deployments",
                            json!({"service": svc}),
                            json!({"deployments": [{"id": dep, "version": "3.1.0"}]}),
                        )],
                        vec![c("rollback_deployment", json!({"deployment_id": dep}), json!({"ok": true}))],
                        vec![c(
                            "notify_user",
                            json!({"email": email, "message": format!("{dep} rolled back")}),
                            json!({"sent": true}),
                        )],
                    ],
                    format!("{dep} was rolled back and {email} was told."),
                )
            }
            4 => {
                let team = self.pick(TEAMS).to_string();
                let email = self.email();
                let phone = if self.rng.random_bool(0.5) { self.mobile() } else { "+49 30 901820".to_string() };
                (
                    format!("Page whoever is on call for {team} about the {svc} outage"),
                    "Support-OnCall",
                    vec![
                        vec![c("get_oncall", json!({"team": team}), json!({"email": email, "phone": phone}))],
                        vec![c(
                            "notify_user",
                            json!({"email": email, "message": format!("{svc} outage")}),
                            json!({"sent": true}),
                        )],
                    ],
                    format!("The on-call engineer of {team} was notified."),
                )
            }
            5 => {
                let alr = self.id("ALR");
                (
                    format!("Acknowledge the critical alert on {svc}"),
                    "Monitoring-Alerts",
                    vec![
                        vec![c(
                            "get_alerts",
                            json!({"service": svc, "severity": "critical"}),
                            json!({"alerts": [{"id": alr}]}),
                        )],
                        vec![c("acknowledge_alert", json!({"alert_id": alr}), json!({"ok": true}))],
                    ],
                    format!("{alr} acknowledged."),
                )
            }
            _ => (
                format!("Is anything {svc} depends on down?"),
                "Infrastructure-Services",
                vec![
                    vec![c(
                        "get_service_dependencies",
                        json!({"service": svc}),
                        json!({"depends_on": ["auth", "gateway"]}),
                    )],
                    vec![
                        c("get_service_status", json!({"service": "auth"}), json!({"state": "up"})),
                        c("get_service_status", json!({"service": "gateway"}), json!({"state": "down"})),
                    ],
                    vec![c(
                        "create_incident",
                        json!({"title": "gateway down", "severity": "high", "service": "gateway"}),
                        json!({"id": "INC-5120"}),
                    )],
                ],
                format!("gateway, which {svc} depends on, is down; INC-5120 was opened."),
            ),
        }
    }

    /// Personal data sprinkled into a request.
    fn pii_suffix(&mut self) -> String {
        match self.rng.random_range(0..7) {
            0 => format!(" Reply to {}.", self.email()),
            1 => format!(" Call me on {} if needed.", self.mobile_written()),
            2 => format!(" My phone is {}.", self.foreign_phone()),
            3 => format!(" The client at {} reported it.", self.ip()),
            4 => format!(" (my staff id card: {})", self.cn_id()),
            5 => format!(" Refund card {} for the affected order.", self.card()),
            _ => format!(" Current employee id is E{}.", self.rng.random_range(100_000..999_999)),
        }
    }
}

fn main() -> std::io::Result<()> {
    let mut out = PathBuf::from("raw/demo/logs");
    let (mut sessions, mut chats, mut seed, mut bench) = (240usize, 60usize, 20261129u64, 0usize);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--out" => out = PathBuf::from(v),
            "--sessions" => sessions = v.parse().expect("--sessions N"),
            "--chats" => chats = v.parse().expect("--chats N"),
            "--seed" => seed = v.parse().expect("--seed S"),
            "--bench" => bench = v.parse().expect("--bench CALLS"),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    std::fs::create_dir_all(&out)?;
    let mut g = Gen { rng: ChaCha8Rng::seed_from_u64(seed), t: 1_772_352_000_000, phones: 0 }; // 2026-03-01T08:00:00Z
    if bench > 0 {
        return bench_events(&mut g, &out, sessions, bench);
    }
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|(n, d, ps)| {
            let props: serde_json::Map<String, Value> =
                ps.iter().map(|p| (p.to_string(), json!({"type": "string"}))).collect();
            json!({"name": n, "description": d, "inputSchema": {"type": "object", "properties": props, "required": ps}})
        })
        .collect();
    std::fs::write(out.join("catalog.json"), serde_json::to_string_pretty(&json!({"tools": tools}))? + "\n")?;

    let mut w = BufWriter::new(std::fs::File::create(out.join("events.jsonl"))?);
    for k in 0..sessions {
        let sid = format!("ops-{k:04}");
        let roll = g.rng.random_range(0..100);
        let (mut user, scenario, mut groups, answer) = if roll < 55 { g.single() } else { g.multi() };
        if g.rng.random_bool(0.25) {
            user.push_str(&g.pii_suffix());
        }
        // Multi-turn: the last group answers a follow-up question (decided before a retry is added).
        let multi_turn = groups.len() > 1 && g.rng.random_bool(0.1);
        // Failures: some unrepaired (dropped by curation), some repaired by a retry.
        let fate = g.rng.random_range(0..100);
        if fate < 8 {
            let last = groups.last_mut().unwrap();
            last[0].result = None;
            last[0].error = Some("upstream timeout");
        } else if fate < 13 {
            let first = &groups[0][0];
            let retry = C { tool: first.tool, args: first.args.clone(), result: first.result.clone(), error: None };
            groups[0][0].result = None;
            groups[0][0].error = Some("503 service unavailable");
            groups.insert(1, vec![retry]);
        }
        // Feedback on most sessions; a few negative ones (dropped by curation).
        let feedback = match g.rng.random_range(0..100) {
            0..=5 => Some(json!("thumbs_down")),
            6..=69 => Some(json!("thumbs_up")),
            _ => None,
        };
        let explicit = g.rng.random_bool(0.1);
        let rfc = g.rng.random_bool(0.5);
        g.t += 600_000;
        let mut t = g.t;
        let last_turn0 = groups.len() - 1 - usize::from(multi_turn);
        for (gi, grp) in groups.iter().enumerate() {
            let turn = if multi_turn && gi + 1 == groups.len() { 1 } else { 0 };
            let start = t;
            for (ci, call) in grp.iter().enumerate() {
                // Parallel calls overlap (same start, different lengths); groups do not.
                let s = start + ci as i64 * 20;
                let e = s + 300 + g.rng.random_range(0..400);
                t = t.max(e + 50);
                let ts = |ms: i64| -> Value {
                    if rfc { json!(jiff::Timestamp::from_millisecond(ms).unwrap().to_string()) } else { json!(ms) }
                };
                let mut ev = json!({"session": sid, "tool": call.tool, "ts_start": ts(s), "ts_end": ts(e), "arguments": call.args});
                if let Some(r) = &call.result {
                    ev["result"] = r.clone();
                }
                if let Some(er) = call.error {
                    ev["error"] = json!(er);
                }
                if turn == 1 {
                    ev["turn"] = json!(1);
                    if ci == 0 {
                        ev["user"] = json!("And what should I do next?");
                        ev["answer"] = json!(answer.clone());
                    }
                } else if gi == 0 && ci == 0 {
                    ev["user"] = json!(user);
                    ev["scenario"] = json!(scenario);
                    if let Some(f) = &feedback {
                        ev["feedback"] = f.clone();
                    }
                }
                if turn == 0 && gi == last_turn0 && ci == 0 {
                    ev["answer"] =
                        json!(if multi_turn { "Here is what I found so far.".to_string() } else { answer.clone() });
                }
                if explicit {
                    ev["group"] = json!(gi);
                }
                serde_json::to_writer(&mut w, &ev)?;
                w.write_all(b"\n")?;
            }
        }
        // A couple of malformed lines, kept out by the import with file:line.
        if k == 17 {
            w.write_all(b"{\"session\": \"ops-0017\", \"tool\": \"get_alerts\", \"ts_start\": \n")?;
        }
        if k == 101 {
            w.write_all(b"{\"session\": \"ops-0101\", \"tool\": \"get_alerts\", \"arguments\": {}}\n")?;
        }
    }
    w.flush()?;

    // OpenAI chat JSONL: chit-chat without tools, off-topic requests, broken arguments.
    let mut w = BufWriter::new(std::fs::File::create(out.join("chats.jsonl"))?);
    for k in 0..chats {
        let id = format!("chat-{k:03}");
        let kind = g.rng.random_range(0..10);
        let line = if kind == 0 {
            json!({"id": id, "messages": [
                {"role": "user", "content": "Tell me a joke about computers"},
                {"role": "assistant", "content": "Why did the server go to therapy? Too many unresolved requests."}]})
        } else if kind == 1 {
            // Off-topic: a genuine-need judge should drop it.
            json!({"id": id, "messages": [
                {"role": "user", "content": "OFF-TOPIC: write a poem about my cat"},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_runbook", "arguments": "{\"topic\": \"cats\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"steps\": []}"},
                {"role": "assistant", "content": "Here is a poem about your cat."}]})
        } else if kind == 2 {
            json!({"id": id, "messages": [
                {"role": "user", "content": "Restart checkout on web-01"},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "restart_service", "arguments": "{\"service\": \"checkout\", \"host\": "}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"error\": \"invalid arguments\"}"},
                {"role": "assistant", "content": "Sorry, I could not restart it."}]})
        } else {
            let (mut user, scenario, groups, answer) = if kind < 7 { g.single() } else { g.multi() };
            if g.rng.random_bool(0.3) {
                user.push_str(&g.pii_suffix());
            }
            let mut msgs = vec![json!({"role": "user", "content": user})];
            let mut n = 0;
            for grp in &groups {
                let calls: Vec<Value> = grp
                    .iter()
                    .map(|c| {
                        n += 1;
                        json!({"id": format!("call_{n}"), "type": "function", "function": {"name": c.tool, "arguments": c.args.to_string()}})
                    })
                    .collect();
                msgs.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
                for (j, c) in grp.iter().enumerate() {
                    let content = c.result.as_ref().map(|r| r.to_string()).unwrap_or_default();
                    msgs.push(json!({"role": "tool", "tool_call_id": format!("call_{}", n - grp.len() + j + 1), "content": content}));
                }
            }
            msgs.push(json!({"role": "assistant", "content": answer}));
            json!({"id": id, "scenario": scenario, "messages": msgs})
        };
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
        if k == 9 {
            w.write_all(b"{\"id\": \"chat-broken\", \"messages\": [\n")?;
        }
    }
    w.flush()?;
    Ok(())
}

/// The benchmark input: `sessions` sessions of `calls` calls each (pairs of parallel
/// calls in sequence), sessions interleaved in the file, some personal data.
fn bench_events(g: &mut Gen, out: &std::path::Path, sessions: usize, calls: usize) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("events.jsonl"))?);
    // Interleave: blocks of 64 sessions emitted round-robin.
    for block in (0..sessions).step_by(64) {
        let ids: Vec<usize> = (block..(block + 64).min(sessions)).collect();
        for step in 0..calls {
            for &k in &ids {
                let (tool, _, _) = TOOLS[(k * 7 + step * 3) % TOOLS.len()];
                let t = 1_772_352_000_000 + k as i64 * 60_000 + (step / 2) as i64 * 1000;
                let mut ev = json!({"session": format!("s{k:06}"), "tool": tool, "ts_start": t, "ts_end": t + 500,
                    "arguments": {"service": SERVICES[k % SERVICES.len()], "id": format!("INC-{}", (k + step) % 9000 + 1000)},
                    "result": {"id": format!("INC-{}", (k + step + 1) % 9000 + 1000), "state": "up"}});
                if step == 0 {
                    ev["user"] = json!(format!("Check {} and mail {}", SERVICES[k % SERVICES.len()], g.email()));
                }
                serde_json::to_writer(&mut w, &ev)?;
                w.write_all(b"\n")?;
            }
        }
    }
    w.flush()
}

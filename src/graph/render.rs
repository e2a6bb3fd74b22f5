//! The accepted graph as petgraph, JSON, DOT, an SVG picture and a `report.md` with its
//! statistics (nodes, edges, density, degrees, strongly connected components). Shared by
//! `graph build` and `graph review import`, so both write the same files.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use super::{Edge, GraphDoc, Node};
use crate::stage::Output;

/// Tool → (description, sub-scenarios).
pub type ToolInfo = BTreeMap<String, (String, Vec<String>)>;

/// Nodes = every tool of the graph source set (isolated ones included), edges sorted.
pub fn doc(tools: &ToolInfo, mut edges: Vec<Edge>) -> GraphDoc {
    edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    let mut nodes: Vec<Node> = tools
        .iter()
        .map(|(t, (d, s))| Node {
            tool: t.clone(),
            description: d.clone(),
            sub_scenarios: s.clone(),
            in_degree: 0,
            out_degree: 0,
        })
        .collect();
    let pos: BTreeMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.tool.clone(), i)).collect();
    for e in &edges {
        if let Some(&i) = pos.get(&e.from) {
            nodes[i].out_degree += 1;
        }
        if let Some(&i) = pos.get(&e.to) {
            nodes[i].in_degree += 1;
        }
    }
    GraphDoc { nodes, edges }
}

pub fn petgraph_of(g: &GraphDoc) -> (DiGraph<String, ()>, BTreeMap<String, NodeIndex>) {
    let mut pg = DiGraph::new();
    let mut idx = BTreeMap::new();
    for n in &g.nodes {
        idx.insert(n.tool.clone(), pg.add_node(n.tool.clone()));
    }
    for e in &g.edges {
        for t in [&e.from, &e.to] {
            if !idx.contains_key(t) {
                let i = pg.add_node(t.clone());
                idx.insert(t.clone(), i);
            }
        }
        pg.add_edge(idx[&e.from], idx[&e.to], ());
    }
    (pg, idx)
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Stats {
    pub nodes: usize,
    pub edges: usize,
    pub density: f64,
    pub max_in_degree: usize,
    pub max_out_degree: usize,
    pub mean_degree: f64,
    pub isolated: usize,
    /// Strongly connected components with more than one tool (sorted members).
    pub cycles: Vec<Vec<String>>,
    pub components: usize,
}

pub fn stats(g: &GraphDoc) -> Stats {
    let (pg, _) = petgraph_of(g);
    let n = pg.node_count();
    let e = pg.edge_count();
    let scc = petgraph::algo::tarjan_scc(&pg);
    let mut cycles: Vec<Vec<String>> = scc
        .iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut v: Vec<String> = c.iter().map(|i| pg[*i].clone()).collect();
            v.sort();
            v
        })
        .collect();
    cycles.sort();
    let ins = |i| pg.neighbors_directed(i, petgraph::Direction::Incoming).count();
    let outs = |i| pg.neighbors_directed(i, petgraph::Direction::Outgoing).count();
    Stats {
        nodes: n,
        edges: e,
        density: if n > 1 { round4(e as f64 / (n * (n - 1)) as f64) } else { 0.0 },
        max_in_degree: pg.node_indices().map(ins).max().unwrap_or(0),
        max_out_degree: pg.node_indices().map(outs).max().unwrap_or(0),
        mean_degree: if n > 0 { round4(2.0 * e as f64 / n as f64) } else { 0.0 },
        isolated: pg.node_indices().filter(|&i| ins(i) + outs(i) == 0).count(),
        cycles,
        components: scc.len(),
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

pub fn dot(g: &GraphDoc) -> String {
    let mut s = String::from("digraph tools {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n");
    let q = |x: &str| format!("\"{}\"", x.replace('\\', "\\\\").replace('"', "\\\""));
    for n in &g.nodes {
        let _ = writeln!(s, "  {};", q(&n.tool));
    }
    for e in &g.edges {
        let _ = writeln!(s, "  {} -> {} [label=\"{}\"];", q(&e.from), q(&e.to), e.support.sessions.len());
    }
    s.push_str("}\n");
    s
}

/// A circular layout: tools on a circle in name order, arrows between them.
pub fn svg(g: &GraphDoc) -> Result<String> {
    use plotters::prelude::*;
    let n = g.nodes.len().max(1);
    let size = (600 + 18 * n as u32).min(1600);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (size, size)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("svg: {e}"))?;
        let c = size as f64 / 2.0;
        let r = c - 160.0;
        let pos: BTreeMap<&str, (i32, i32, f64)> = g
            .nodes
            .iter()
            .enumerate()
            .map(|(i, nd)| {
                let a = i as f64 / n as f64 * std::f64::consts::TAU - std::f64::consts::FRAC_PI_2;
                (nd.tool.as_str(), ((c + r * a.cos()) as i32, (c + r * a.sin()) as i32, a))
            })
            .collect();
        let edge_color = RGBColor(90, 110, 170);
        for e in &g.edges {
            let (Some(&(x1, y1, _)), Some(&(x2, y2, _))) = (pos.get(e.from.as_str()), pos.get(e.to.as_str())) else {
                continue;
            };
            let (dx, dy) = ((x2 - x1) as f64, (y2 - y1) as f64);
            let len = (dx * dx + dy * dy).sqrt().max(1.0);
            let (ux, uy) = (dx / len, dy / len);
            // Stop short of the node circle; arrowhead at the end.
            let (ex, ey) = (x2 as f64 - ux * 8.0, y2 as f64 - uy * 8.0);
            root.draw(&PathElement::new(vec![(x1, y1), (ex as i32, ey as i32)], edge_color.stroke_width(1)))
                .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
            let (bx, by) = (ex - ux * 9.0, ey - uy * 9.0);
            let head = vec![
                (ex as i32, ey as i32),
                ((bx - uy * 4.0) as i32, (by + ux * 4.0) as i32),
                ((bx + uy * 4.0) as i32, (by - ux * 4.0) as i32),
            ];
            root.draw(&Polygon::new(head, edge_color.filled())).map_err(|e| anyhow::anyhow!("svg: {e}"))?;
        }
        for nd in &g.nodes {
            let (x, y, a) = pos[nd.tool.as_str()];
            let color = if nd.in_degree + nd.out_degree == 0 { RGBColor(180, 180, 180) } else { RGBColor(200, 80, 60) };
            root.draw(&Circle::new((x, y), 6, color.filled())).map_err(|e| anyhow::anyhow!("svg: {e}"))?;
            let (lx, ly) = (x as f64 + 12.0 * a.cos(), y as f64 + 12.0 * a.sin());
            let anchor = if a.cos() >= 0.0 {
                plotters::style::text_anchor::HPos::Left
            } else {
                plotters::style::text_anchor::HPos::Right
            };
            let style = TextStyle::from(("sans-serif", 13).into_font())
                .color(&BLACK)
                .pos(plotters::style::text_anchor::Pos::new(anchor, plotters::style::text_anchor::VPos::Center));
            root.draw(&Text::new(nd.tool.clone(), (lx as i32, ly as i32), style))
                .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
        }
        root.present().map_err(|e| anyhow::anyhow!("svg: {e}"))?;
    }
    Ok(buf)
}

pub fn report(g: &GraphDoc, st: &Stats, title: &str, extra: &[String]) -> String {
    let mut s = format!("# {title}\n\n");
    let _ = writeln!(s, "| measure | value |\n| --- | --- |");
    let _ = writeln!(s, "| nodes (tools) | {} |", st.nodes);
    let _ = writeln!(s, "| edges | {} |", st.edges);
    let _ = writeln!(s, "| density | {} |", st.density);
    let _ = writeln!(s, "| mean degree | {} |", st.mean_degree);
    let _ = writeln!(s, "| max in-degree | {} |", st.max_in_degree);
    let _ = writeln!(s, "| max out-degree | {} |", st.max_out_degree);
    let _ = writeln!(s, "| isolated tools | {} |", st.isolated);
    let _ = writeln!(s, "| strongly connected components | {} |", st.components);
    let _ = writeln!(s, "| components with a cycle | {} |\n", st.cycles.len());
    for c in &st.cycles {
        let _ = writeln!(s, "- cycle among: {}", c.join(", "));
    }
    for line in extra {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "\n## Degrees\n\n| tool | in | out |\n| --- | --- | --- |");
    for n in &g.nodes {
        let _ = writeln!(s, "| {} | {} | {} |", n.tool, n.in_degree, n.out_degree);
    }
    let _ = writeln!(
        s,
        "\n## Edges\n\n| from | to | sessions | count | value flow | verdict | reason |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for e in &g.edges {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            e.from,
            e.to,
            e.support.sessions.len(),
            e.support.count,
            e.value_flow.len(),
            e.verdict,
            e.reason.replace('|', "/")
        );
    }
    s
}

/// Write graph.json, graph.dot, graph.svg and report.md.
pub fn write_all(out: &mut Output, g: &GraphDoc, title: &str, extra: &[String]) -> Result<Stats> {
    let st = stats(g);
    out.json("graph.json", g)?;
    out.file("graph.dot", dot(g).into_bytes());
    out.file("graph.svg", svg(g)?.into_bytes());
    out.file("report.md", report(g, &st, title, extra).into_bytes());
    out.count("nodes", st.nodes);
    out.count("edges", st.edges);
    Ok(st)
}

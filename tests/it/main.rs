//! The integration tests, as one test binary (`cargo test --test it`): one module per
//! topic and one `support` folder of shared helpers. A single binary links once instead
//! of once per file, which is most of the build time of the tests after a change in
//! `src/`. Run one topic with `cargo test --test it foundation_cli::` (module path filter).

mod support;

mod answers;
mod audit;
mod config_doc;
mod csv_formulas;
mod determinism;
mod docs;
mod duplicate_keys;
mod efs_compare;
mod efs_flow;
mod efs_index;
mod embed_endpoint;
mod embed_minilm;
mod estimates;
mod eval;
mod execute_agent;
mod formats;
mod foundation_cli;
mod foundation_safety;
mod function_length;
mod fuzz;
mod ground_truth;
mod guides;
mod init;
mod inspect;
mod levels;
mod llm_batch;
mod llm_batch_api;
mod llm_cli;
mod llm_client;
mod llm_endpoints;
mod llm_local;
mod logs;
mod mcp_bench;
mod mcp_cli;
mod mcp_client;
mod mcp_sandbox;
mod pipeline;
mod registry;
mod registry_bench;
mod release;
mod review;
mod review_browser;
mod score_cli;
mod score_compat;
mod score_properties;
mod secrets;
mod setup;
mod stage_cli;
mod synth;

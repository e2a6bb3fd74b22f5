# benchgen — the two commands: `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
# The demo runs the dev-profile binary, the one `make test` builds too (Cargo.toml says why).
BENCHGEN := target/debug/benchgen
export BENCHGEN_CACHE ?= $(HOME)/.cache/benchgen
# Pseudonym key of the demo's log anonymisation (real use: a secret of your own).
export BENCHGEN_ANON_SECRET ?= benchgen-demo-only

.PHONY: demo test setup build build-release lint unit bench clean-demo fuzz

## Install what is missing (Debian packages, model assets, local LLM server, MCP servers).
setup:
	@scripts/setup.sh

# $(call beside,A,B): run A in the background and B meanwhile; fails, saying which, when
# either fails. Used for a cargo build beside setup: both are CPU-bound, and each alone
# leaves a core idle at times (a serial crate chain, a link, a download). A runs in a
# session of its own (a recipe's background job ignores Ctrl-C) and is stopped when B
# fails or on Ctrl-C (once B has returned to the shell), so no cargo outlives make (its
# group, or the job itself when B failed before `setsid` made the group).
beside = echo '$(1) (beside $(2))'; setsid $(1) & first=$$!; trap 'kill -- -$$first 2>/dev/null || kill $$first 2>/dev/null' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM; second=0; $(2) || second=$$?; \
	[ $$second = 0 ] || { echo "make: $(2) failed (exit $$second)"; kill -- -$$first 2>/dev/null || kill $$first 2>/dev/null; }; \
	first_rc=0; wait $$first || first_rc=$$?; trap - EXIT; \
	[ $$second != 0 ] || [ $$first_rc = 0 ] || echo "make: $(1) failed (exit $$first_rc)"; \
	[ $$first_rc = 0 ] && [ $$second = 0 ]

# The commands `make demo` and `make test` share with `build`, `lint` and `unit`.
BUILD = $(CARGO) build --locked --bin benchgen
CLIPPY = $(CARGO) clippy --all-targets --locked -- -D warnings
TESTS = $(CARGO) test --all-targets --locked

build:
	$(BUILD)

build-release:
	$(CARGO) build --release --locked

## Run the whole pipeline on raw/demo with the local model. Setup installs only what the demo
## needs (`scripts/setup.sh demo`: the models, llama-server, the embedding assets) and the
## build runs beside it, after the Debian packages the build needs.
demo:
	@scripts/setup.d/00-system.sh
	@$(call beside,$(BUILD),scripts/setup.sh demo)
	$(BENCHGEN) --config pipeline/demo.toml run
	$(BENCHGEN) --config pipeline/demo.toml status

lint:
	$(CARGO) fmt --check
	$(CLIPPY)

unit:
	$(TESTS)

## Everything CI checks: the whole setup beside clippy (after the Debian packages clippy's
## build scripts need), then the tests.
test:
	@scripts/setup.d/00-system.sh
	$(CARGO) fmt --check
	@$(call beside,$(CLIPPY),scripts/setup.sh)
	$(TESTS)

## The long fuzz run (docs/inputs.md#the-fuzz-suite); `make test` runs 32 cases per surface.
FUZZ_CASES ?= 2000
fuzz:
	BENCHGEN_FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test --locked --test it fuzz:: -- --test-threads=2

## Figures for the README (not part of `make test`).
bench: build-release
	@scripts/bench.sh

## Remove everything the demo wrote under artifacts/ (the stage list knows what that is).
clean-demo: build
	$(BENCHGEN) --config pipeline/demo.toml clean

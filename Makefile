# tlsrum — every target installs what is missing first (scripts/install-deps.sh).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(HOME)/go/bin:$(PATH)
CARGO ?= cargo
TLSRUM := target/release/tlsrum
# Seconds of fuzzing per target: `make fuzz`, and the smoke in `make test`.
FUZZ_SECS ?= 600
FUZZ_SMOKE_SECS ?= 10

.PHONY: deps build deb image k8s-manifest demo test baselines pcaps bench bench-instructions clean experiment experiment-ats fuzz fuzz-smoke docs-charts

deps:
	@bash scripts/install-deps.sh

# The release binary, profile-guided when the toolchain has llvm-profdata
# (scripts/build-release.sh; TLSRUM_PGO=0 for a plain release build).
build: deps
	bash scripts/build-release.sh

# The Debian package, target/release/tlsrum_VERSION-1_ARCH.deb (cargo-deb;
# binary, systemd unit, /etc/default/tlsrum, man pages, completions).
deb: build
	bash scripts/deb.sh release

# The container image localhost/tlsrum:VERSION, from scratch (buildah; root).
image: build
	bash scripts/image.sh $(TLSRUM)

# deploy/kubernetes/tlsrum.yaml: the Helm chart rendered with its defaults.
k8s-manifest: deps
	bash scripts/k8s-manifest.sh

# The main job on the bundled captures: a table per server name.
demo: build
	$(TLSRUM) replay pcaps/

test: deps
	$(CARGO) test --profile ci --locked --workspace --no-fail-fast
	$(CARGO) clippy --profile ci --locked --workspace --all-targets -- -D warnings
	cd fuzz && $(CARGO) clippy --locked --all-targets -- -D warnings
	cd fuzz/seeds && $(CARGO) clippy --locked --all-targets -- -D warnings
	# Every intra-doc link resolves (private items documented, so links
	# between them count).
	RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" $(CARGO) doc --locked --no-deps --workspace --document-private-items
	bash fuzz/fuzz.sh smoke $(FUZZ_SMOKE_SECS)

# libFuzzer on stable Rust (fuzz/README.md): every target FUZZ_SECS seconds.
fuzz: deps
	bash fuzz/fuzz.sh run $(FUZZ_SECS)

# Each target replays its seed corpus and fuzz/regressions/, then fuzzes
# FUZZ_SMOKE_SECS seconds; a crash fails (the last step of `make test`).
fuzz-smoke: deps
	bash fuzz/fuzz.sh smoke $(FUZZ_SMOKE_SECS)

# Rewrite pcaps/*.baseline.ndjson (the full NDJSON replay of every capture,
# compared byte for byte by agent/tests/baseline.rs) after an intended change
# of the output; review `git diff pcaps/` and commit it with the change.
baselines: deps
	bash scripts/baselines.sh

# docs/timeseries.png (README, "Slicing"): the HTML report's "Over time"
# section for the bundled capture that spans an nginx reload, shot in headless
# Chromium by scripts/report-chart.mjs; docs/report.png (README, "HTML
# report"): the whole report of the bundled captures, by tests/html/inspect.mjs.
docs-charts: build
	$(TLSRUM) replay --window 5s --html target/timeseries.html pcaps/curl-nginx-upgrade.pcapng >/dev/null
	node scripts/report-chart.mjs target/timeseries.html docs/timeseries.png
	$(TLSRUM) replay --html target/report.html pcaps >/dev/null
	node tests/html/inspect.mjs target/report.html docs/report.png >/dev/null

# Regenerate pcaps/ from real servers and clients (needs root for loopback capture).
pcaps: deps
	python3 scripts/gen-pcaps/generate.py --out pcaps
	python3 scripts/gen-pcaps/quic.py --out pcaps

# Throughput benchmark on a large synthetic-from-real capture (see bench/README.md).
bench: build
	bash bench/run.sh

# Exact instruction and allocation counts per packet and per connection
# (callgrind); BASELINE=path/to/an/older/tlsrum compares with it first.
bench-instructions: build
	bash bench/instructions.sh $(BASELINE) $(TLSRUM)

clean:
	$(CARGO) clean

# Handshake costs on emulated wide-area links (tools/delayline, root): writes
# docs/experiments.md and docs/*.png (see scripts/experiment/run.py).
experiment: build
	$(CARGO) build --release --locked -p delayline
	python3 scripts/experiment/run.py --docs docs

# Apache Traffic Server's pre-warmed TLS tunnels (issue 16; root): writes
# section 5 of docs/experiments.md, docs/experiment5-ats.png and
# docs/experiment5-ats.json (see scripts/experiment/ats_report.py).
experiment-ats: build
	$(CARGO) build --release --locked -p delayline
	python3 scripts/experiment/ats_report.py --docs docs

# fastpath — build, test and demo. `make demo` and `make test` install what is
# missing through `make deps` first.

GO      ?= go
# rustup installs cargo here; make deps puts it there if it is missing.
export PATH := $(HOME)/.cargo/bin:$(PATH)
BIN     := bin/fastpath
# Every Go package with BPF programs keeps its bpf2go directives in bpf.go and
# its C under bpf/<name>/ (the lab's under bpf/lab/).
BPF_PKGS := $(patsubst %/bpf.go,%,$(wildcard internal/*/bpf.go))
BPF_STAMPS := $(BPF_PKGS:%=%/.bpf-stamp)
BPF_INCLUDE := $(wildcard bpf/include/*.h)

.PHONY: all build deps test demo soak clean bench lab-down figures
all: build

deps:
	@bash scripts/deps.sh

# bpf2go output is regenerated when the C it comes from changes.
.SECONDEXPANSION:
internal/%/.bpf-stamp: $$(wildcard bpf/$$*/*.c bpf/$$*/*.h) $(BPF_INCLUDE) internal/%/bpf.go
	cd internal/$* && $(GO) generate
	@touch $@

build: $(BPF_STAMPS) bin/fastpath-rt
	$(GO) build -o $(BIN) ./cmd/fastpath

# The userspace runtime (Rust); cargo rebuilds only what changed.
CARGO ?= cargo
bin/fastpath-rt: FORCE
	$(CARGO) build --release --quiet --manifest-path runtime/Cargo.toml
	@mkdir -p bin && cp runtime/target/release/fastpath-rt bin/fastpath-rt

.PHONY: FORCE
FORCE:

test: deps build
	@bash scripts/test.sh

demo: deps build
	./$(BIN) lab bench veth bridge xdp-redirect afxdp-fwd rt-jit br br-cold br-nomac ref-router scion-ref scion-hybrid routed fw-0 fw-100k iptables-10k nft-10k xdp-filter-10k --runs 5 --interleave \
		--json-file results/bench.json --md results/bench.md --plot results/bench.png
	@# The border router at Anapaya's IMIX sizes (136/570/1518 B; 138/576/1500 here) against its anchor.
	./$(BIN) lab bench xdp-redirect br br-cold --size 138,576,1500 --runs 3 --interleave \
		--json-file results/br-sizes.json --md results/br-sizes.md
	@# Jumbo frames (8,000 B) on a SCION network of MTU 9000: scionproto's router alone, and fastpath in front.
	./$(BIN) lab bench scion-ref scion-hybrid --size 8000 --runs 3 --interleave \
		--json-file results/scion-jumbo.json --md results/scion-jumbo.md
	@# The border router behind the firewall on one device (40 rules, conntrack off), against the router alone.
	./$(BIN) lab bench br br-fw --runs 5 --interleave --json-file results/br-fw.json --md results/br-fw.md
	@# A host protected by its own firewall with the host policy, iperf3 to it: fastpath (native, generic) and nftables.
	./$(BIN) lab tcp fw-host-tcp --runs 3 --seconds 3 --json-file results/fw-host.json --md results/fw-host.md
	@# Unmodified ping6 and iperf3 between two leaf ASes' hosts: plain IPv6, and SCION through the translator.
	./$(BIN) lab tra ip ip-xdp tra --runs 1 --seconds 3 --json-file results/tra.json --md results/tra.md --plot results/tra.png
	@# The same hosts on links of MTU 9000: the translator's pair follows the jumbo paths.
	./$(BIN) lab tra ip-xdp tra --mtu 9000 --runs 1 --seconds 3 --json-file results/tra-jumbo.json --md results/tra-jumbo.md
	@# A network in the shape of scionproto's default.topo (16 ASes in 2 ISDs, 42 routers), fastpath in front of every
	@# router: every pair of leaf ASes, each kind of path proved forwarded in XDP, scionproto's router as the oracle.
	./$(BIN) --prefix fp-topo- lab scion up --topo default --hybrid > results/scion-topo.txt
	./$(BIN) --prefix fp-topo- lab scion check >> results/scion-topo.txt; rc=$$?; ./$(BIN) --prefix fp-topo- lab scion down; exit $$rc
	@echo "results: results/bench.{json,md,png} results/br-sizes.{json,md} results/scion-jumbo.{json,md} results/br-fw.{json,md} results/fw-host.{json,md} results/tra.{json,md,png} results/tra-jumbo.{json,md} results/scion-topo.txt"

# docs/figures.md from the reports make demo left in results/.
figures: build
	./$(BIN) lab figures --results results --out docs/figures.md

# The translator over 30 minutes: steady UDP, TCP and ping6 between two
# translated hosts while links flap every minute and scionproto's daemons and
# control services restart every five (docs/tra.md, Long runs).
soak: deps build
	./$(BIN) lab tra-soak --duration 30m --flap-every 60s --flap-for 10s --restart-every 5m \
		--json-file results/soak.json --md results/soak.md --log-dir results/soak-logs

lab-down: build
	./$(BIN) lab down

clean:
	rm -rf bin results runtime/target
	rm -f $(BPF_STAMPS) $(foreach p,$(BPF_PKGS),$(wildcard $(p)/*_bpfel.go $(p)/*_bpfel.o))

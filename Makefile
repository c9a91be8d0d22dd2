# fastpath — build, test and demo. `make demo` and `make test` install what is
# missing through `make deps` first.

GO      ?= go
# rustup installs cargo here; make deps puts it there if it is missing.
export PATH := $(HOME)/.cargo/bin:$(PATH)
BIN     := bin/fastpath
# What `fastpath version` says: the release from git (scripts/version.sh),
# the commit, and when it was built (SOURCE_DATE_EPOCH, if set, for
# reproducible builds).
VERSION := $(shell bash scripts/version.sh)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
DATE    := $(shell date -u $(if $(SOURCE_DATE_EPOCH),-d @$(SOURCE_DATE_EPOCH)) +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
# Every Go package with BPF programs keeps its bpf2go directives in bpf.go and
# its C under bpf/<name>/ (the lab's under bpf/lab/).
BPF_PKGS := $(patsubst %/bpf.go,%,$(wildcard internal/*/bpf.go))
BPF_STAMPS := $(BPF_PKGS:%=%/.bpf-stamp)
BPF_INCLUDE := $(wildcard bpf/include/*.h)

.PHONY: all build deps test demo soak clean bench lab-down figures install uninstall deb dist check-generated test-peers
all: build

deps:
	@bash scripts/deps.sh

# bpf2go output is regenerated when the C it comes from changes.
.SECONDEXPANSION:
internal/%/.bpf-stamp: $$(wildcard bpf/$$*/*.c bpf/$$*/*.h) $(BPF_INCLUDE) internal/%/bpf.go
	cd internal/$* && $(GO) generate
	@touch $@

build: $(BPF_STAMPS) bin/fastpath-rt
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/fastpath

# The userspace runtime (Rust); cargo rebuilds only what changed.
CARGO ?= cargo
bin/fastpath-rt: FORCE
	FASTPATH_VERSION=$(VERSION) FASTPATH_COMMIT=$(COMMIT) $(CARGO) build --release --quiet --manifest-path runtime/Cargo.toml
	@mkdir -p bin && cp runtime/target/release/fastpath-rt bin/fastpath-rt

.PHONY: FORCE
FORCE:

test: deps build
	@bash scripts/test.sh

# The peer harness and its engines (rbpf, ubpf), built on demand and cached
# per machine, each held to the runtime's interpreter.
test-peers: deps build
	FASTPATH_PEERS=1 FASTPATH_RT=$(CURDIR)/bin/fastpath-rt $(GO) test -count=1 -v -run 'TestPeerHarness' ./internal/rt/

demo: deps build
	./$(BIN) lab bench veth bridge xdp-redirect afxdp-fwd rt-jit br br-cold br-nomac ref-router scion-ref scion-hybrid routed fw-0 fw-100k iptables-10k nft-10k xdp-filter-10k --runs 5 --interleave \
		--json-file results/bench.json --md results/bench.md --plot results/bench.png
	@# The border router at Anapaya's IMIX sizes (136/570/1518 B; 138/576/1500 here) against its anchor.
	./$(BIN) lab bench xdp-redirect br br-cold br-nomac --size 138,576,1500 --runs 3 --interleave \
		--json-file results/br-sizes.json --md results/br-sizes.md
	@# Jumbo frames (8,000 B) on a SCION network of MTU 9000: scionproto's router alone, and fastpath in front.
	./$(BIN) lab bench scion-ref scion-hybrid --size 8000 --runs 3 --interleave \
		--json-file results/scion-jumbo.json --md results/scion-jumbo.md
	@# The border router behind the firewall on one device (40 rules, conntrack off), against the router alone.
	./$(BIN) lab bench xdp-redirect br br-fw --runs 5 --interleave --json-file results/br-fw.json --md results/br-fw.md
	@# The firewall's cost as its rule set grows, beside iptables, nftables and xdp-filter (the curve of docs/figures.md),
	@# and what fastpath monitor costs: a tenth of the flows dropped with nobody listening, and with a monitor of the drops.
	./$(BIN) lab bench routed fw-0 fw-0-drops fw-0-monitor fw-1k fw-10k iptables-1k nft-1k xdp-filter-1k --runs 3 --interleave \
		--json-file results/fw-rules.json --md results/fw-rules.md
	@# A host protected by its own firewall with the host policy, iperf3 to it: fastpath (native, generic) and nftables.
	./$(BIN) lab tcp fw-host-tcp --runs 3 --seconds 3 --json-file results/fw-host.json --md results/fw-host.md
	@# Unmodified ping6 and iperf3 between two leaf ASes' hosts: plain IPv6, SCION through the translator, and scionproto's SIG.
	./$(BIN) lab tra ip ip-xdp tra sig --runs 1 --seconds 3 --json-file results/tra.json --md results/tra.md --plot results/tra.png
	@# The same hosts on links of MTU 9000: the translator's pair follows the jumbo paths.
	./$(BIN) lab tra ip-xdp tra --mtu 9000 --runs 1 --seconds 3 --json-file results/tra-jumbo.json --md results/tra-jumbo.md
	@# A network in the shape of scionproto's default.topo (16 ASes in 2 ISDs, 42 routers), fastpath in front of every
	@# router: every pair of leaf ASes, each kind of path proved forwarded in XDP, scionproto's router as the oracle.
	./$(BIN) --prefix fp-topo- lab scion up --topo default --hybrid > results/scion-topo.txt
	./$(BIN) --prefix fp-topo- lab scion check >> results/scion-topo.txt; rc=$$?; ./$(BIN) --prefix fp-topo- lab scion down; exit $$rc
	@# The runtime beside other userspace engines (rbpf and ubpf from crates.io, built on first use), on the
	@# benchmark programs and on programs of our own, and the kernel's JIT less its test run's fixed cost.
	./$(BIN) rt bench --peers --own --rounds 5 --json-file results/rt-peers.json --md results/rt-peers.md
	@echo "results: results/rt-peers.{json,md} results/bench.{json,md,png} results/br-sizes.{json,md} results/scion-jumbo.{json,md} results/br-fw.{json,md} results/fw-rules.{json,md} results/fw-host.{json,md} results/tra.{json,md,png} results/tra-jumbo.{json,md} results/scion-topo.txt"

# docs/figures.md and its plots (docs/figures/*.png) from the reports make demo left in results/.
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

# The bpf2go output is committed (go install builds from it): clean keeps it
# and drops the stamps, so the next build regenerates it from bpf/.
clean:
	rm -rf bin build dist results runtime/target
	rm -f $(BPF_STAMPS)

# The committed bpf2go output is what bpf/ compiles to (scripts/test.sh runs it too).
check-generated:
	@bash scripts/check-generated.sh

# ---- Installing -------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=]: the binaries, the systemd units
# (their /usr/bin/fastpath rewritten to $(PREFIX)/bin/fastpath), the example
# configurations, the sysctl settings, shell completions and man pages, the
# Grafana dashboards and Prometheus alert rules (share/fastpath/monitoring),
# and an empty /etc/fastpath for the configurations. Units and /etc are not under
# PREFIX: systemd and the units look for them where they are.
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     := $(PREFIX)/bin
UNITDIR    ?= /lib/systemd/system
SYSCONFDIR ?= /etc
DOCDIR     := $(PREFIX)/share/doc/fastpath
MONDIR     := $(PREFIX)/share/fastpath/monitoring
MANDIR     := $(PREFIX)/share/man
# systemd-sysctl reads /usr/local/lib/sysctl.d and /usr/lib/sysctl.d alike.
SYSCTLDIR  := $(PREFIX)/lib/sysctl.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
UNITS      := $(wildcard deploy/systemd/*.service)
EXAMPLES   := $(wildcard deploy/examples/*)
DASHBOARDS := $(wildcard deploy/monitoring/grafana/*.json)
PROMFILES  := $(wildcard deploy/monitoring/prometheus/*.yml)

# Completions and man pages come from the binary itself (cobra).
build/completion: $(BIN)
	@rm -rf $@ && mkdir -p $@
	./$(BIN) completion bash > $@/fastpath
	./$(BIN) completion zsh > $@/_fastpath
	./$(BIN) completion fish > $@/fastpath.fish

# `fastpath man DIR` writes one page per command; a binary without the
# command gets no pages (said once).
build/man: $(BIN)
	@rm -rf $@ && mkdir -p $@
	@if ./$(BIN) man --help >/dev/null 2>&1; then ./$(BIN) man $@; \
	else echo "note: this fastpath has no man command: no man pages"; fi

install: build build/completion build/man
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)/examples \
		$(DESTDIR)$(SYSCTLDIR) $(DESTDIR)$(SYSCONFDIR)/fastpath $(DESTDIR)$(MONDIR)/grafana $(DESTDIR)$(MONDIR)/prometheus \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0755 bin/fastpath bin/fastpath-rt $(DESTDIR)$(BINDIR)/
	for u in $(UNITS); do \
		sed 's#/usr/bin/fastpath#$(BINDIR)/fastpath#g' $$u > $(DESTDIR)$(UNITDIR)/$$(basename $$u) && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename $$u) || exit 1; \
	done
	$(if $(EXAMPLES),install -m 0644 $(EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/)
	install -m 0644 deploy/sysctl.d/60-fastpath.conf $(DESTDIR)$(SYSCTLDIR)/
	install -m 0644 $(DASHBOARDS) $(DESTDIR)$(MONDIR)/grafana/
	install -m 0644 $(PROMFILES) $(DESTDIR)$(MONDIR)/prometheus/
	install -m 0644 build/completion/fastpath $(DESTDIR)$(BASHCOMPDIR)/fastpath
	install -m 0644 build/completion/_fastpath $(DESTDIR)$(ZSHCOMPDIR)/_fastpath
	install -m 0644 build/completion/fastpath.fish $(DESTDIR)$(FISHCOMPDIR)/fastpath.fish
	@# Each page into the directory of its section (fastpath.8: man8).
	for p in $(wildcard build/man/*.[1-8]); do \
		install -d $(DESTDIR)$(MANDIR)/man$${p##*.} && install -m 0644 $$p $(DESTDIR)$(MANDIR)/man$${p##*.}/ || exit 1; \
	done
	@[ -n "$(DESTDIR)" ] || echo "installed; now: systemctl daemon-reload && sysctl --system (see docs/install.md)"

# Removes what install put there; /etc/fastpath and what it holds (the
# operator's configurations) stay. Attached functions keep running: their
# programs are pinned in the kernel, not held by the binaries.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/fastpath $(DESTDIR)$(BINDIR)/fastpath-rt
	rm -f $(foreach u,$(UNITS),$(DESTDIR)$(UNITDIR)/$(notdir $(u)))
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -rf $(DESTDIR)$(MONDIR)
	-rmdir $(DESTDIR)$(PREFIX)/share/fastpath 2>/dev/null
	rm -f $(DESTDIR)$(SYSCTLDIR)/60-fastpath.conf
	rm -f $(DESTDIR)$(BASHCOMPDIR)/fastpath $(DESTDIR)$(ZSHCOMPDIR)/_fastpath $(DESTDIR)$(FISHCOMPDIR)/fastpath.fish
	rm -f $(DESTDIR)$(MANDIR)/man[1-8]/fastpath.[1-8] $(DESTDIR)$(MANDIR)/man[1-8]/fastpath-*.[1-8]
	-rmdir $(DESTDIR)$(SYSCONFDIR)/fastpath 2>/dev/null

# ---- Releasing --------------------------------------------------------------
# make deb: dist/fastpath_VERSION_amd64.deb, built by nfpm (deploy/nfpm.yaml)
# from a staged `make install` with PREFIX=/usr. nfpm comes from the Go module
# proxy through deploy/nfpm.mod, apart from fastpath's own go.mod.
DEB_ROOT := build/deb-root
MAINTAINER ?= $(shell git config user.name) <$(shell git config user.email)>
ARCH     := amd64
deb: build build/completion build/man
	rm -rf $(DEB_ROOT) dist/fastpath_*.deb && mkdir -p dist
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(DEB_ROOT) PREFIX=/usr \
		ZSHCOMPDIR=/usr/share/zsh/vendor-completions VERSION=$(VERSION) DATE=$(DATE)
	rmdir $(DEB_ROOT)/etc/fastpath
	@# Debian's form: stripped binaries, compressed man pages, the licences
	@# in the copyright file (pointing at /usr/share/common-licenses).
	strip --strip-unneeded $(DEB_ROOT)/usr/bin/fastpath $(DEB_ROOT)/usr/bin/fastpath-rt
	if [ -d $(DEB_ROOT)/usr/share/man ]; then find $(DEB_ROOT)/usr/share/man -type f -exec gzip -9n {} +; fi
	install -m 0644 deploy/debian/copyright $(DEB_ROOT)/usr/share/doc/fastpath/copyright
	@# A native package's changelog: the version and the commit it is built from.
	printf 'fastpath (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n' \
		'$(VERSION)' '$(COMMIT)' '$(MAINTAINER)' "$$(date -R -u -d $(DATE))" \
		| gzip -9n > $(DEB_ROOT)/usr/share/doc/fastpath/changelog.gz
	@# The C libraries the binaries link, at the newest symbol version they use.
	glibc=$$(objdump -T bin/fastpath bin/fastpath-rt | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2); \
	VERSION=$(VERSION) ARCH=$(ARCH) ROOT=$(DEB_ROOT) MAINTAINER="$(MAINTAINER)" \
	DEPENDS="libc6 (>= $$glibc), libgcc-s1" \
		$(GO) tool -modfile=deploy/nfpm.mod nfpm package --config deploy/nfpm.yaml --packager deb \
		--target dist/fastpath_$(VERSION)_$(ARCH).deb

# make dist: dist/fastpath-VERSION-linux-amd64.tar.gz (binaries, units,
# examples, sysctl file, completions, man pages, dashboards and alert rules,
# LICENSE, README, docs), the
# .deb, and SHA256SUMS over both.
DIST_NAME := fastpath-$(VERSION)-linux-$(ARCH)
dist: deb
	rm -rf build/$(DIST_NAME) dist/*.tar.gz dist/SHA256SUMS
	mkdir -p build/$(DIST_NAME)/bin build/$(DIST_NAME)/systemd
	install -m 0755 bin/fastpath bin/fastpath-rt build/$(DIST_NAME)/bin/
	strip --strip-unneeded build/$(DIST_NAME)/bin/fastpath build/$(DIST_NAME)/bin/fastpath-rt
	$(if $(UNITS),install -m 0644 $(UNITS) build/$(DIST_NAME)/systemd/)
	cp -r deploy/examples deploy/sysctl.d build/completion build/$(DIST_NAME)/
	mkdir -p build/$(DIST_NAME)/monitoring/grafana build/$(DIST_NAME)/monitoring/prometheus
	install -m 0644 $(DASHBOARDS) build/$(DIST_NAME)/monitoring/grafana/
	install -m 0644 $(PROMFILES) build/$(DIST_NAME)/monitoring/prometheus/
	$(if $(wildcard build/man/*.[1-8]),mkdir -p build/$(DIST_NAME)/man && cp build/man/*.[1-8] build/$(DIST_NAME)/man/)
	cp -r LICENSE README.md docs build/$(DIST_NAME)/
	cp bpf/LICENSE build/$(DIST_NAME)/LICENSE.bpf
	tar -C build --owner=0 --group=0 --numeric-owner --sort=name \
		$(if $(SOURCE_DATE_EPOCH),--mtime=@$(SOURCE_DATE_EPOCH)) \
		-czf dist/$(DIST_NAME).tar.gz $(DIST_NAME)
	cd dist && sha256sum $(DIST_NAME).tar.gz fastpath_$(VERSION)_$(ARCH).deb > SHA256SUMS
	@echo "dist/: $(DIST_NAME).tar.gz fastpath_$(VERSION)_$(ARCH).deb SHA256SUMS"

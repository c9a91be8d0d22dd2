// SCION-mapped IPv6 addresses (SM-IP), in the current format of scion-cpp's
// scion2ip and Scitra-TUN.

package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/scionproto/scion/pkg/addr"
)

// The upper 64 bits of an SM-IP address: the prefix 0xfc (8 bits), the ISD
// (12 bits), then a 4-bit field whose top bit picks the form:
//
//   - top bit 0: a BGP-style ASN below 2^19 in the 20 bits from that field
//     on, then a 24-bit AS-local prefix;
//   - 0xe: a public SCION ASN from 2:0:0 to 2:ffff:ffff, as its low 32 bits,
//     then an 8-bit AS-local prefix;
//   - anything else: reserved.
//
// The lower 64 bits are the host's interface identifier. An IPv4 host is
// local prefix 0 with IID 0:ffff:<IPv4>; an IPv6 host's SCION address is its
// SM-IP address itself, so a reply maps back without a table.
const (
	smipPrefix = 0xfc
	// MaxISD is the highest ISD an SM-IP address holds (12 bits).
	MaxISD = 1<<12 - 1
	// MaxBGPASN is the highest BGP-style ASN of the first form (19 bits).
	MaxBGPASN = 1<<19 - 1
	// The public SCION ASNs of the second form: 2:0:0 to 2:ffff:ffff.
	firstPublicAS = addr.AS(2 << 32)
	lastPublicAS  = addr.AS(2<<32 | 0xffffffff)
	publicForm    = 0xe
)

// ErrNotMappable is matched by every refusal of a SCION address.
var ErrNotMappable = errors.New("no SCION-mapped IPv6 address")

// ErrNotSMIP is matched by every refusal of an IPv6 address.
var ErrNotSMIP = errors.New("not a SCION-mapped IPv6 address")

// Mapping is what an SM-IP address says: an ISD-AS, the AS-local prefix and
// the interface identifier, and the SCION host address it stands for.
type Mapping struct {
	IA addr.IA
	// Local is the AS-local prefix: 24 bits for a BGP-style ASN, 8 for a
	// public SCION ASN.
	Local uint32
	// IID is the lower 64 bits.
	IID uint64
}

// Host is the SCION host address: the IPv4 address of an IPv4 host (local
// prefix 0, IID 0:ffff:<IPv4>), else the SM-IP address itself.
func (m Mapping) Host(smip netip.Addr) netip.Addr {
	if m.Local == 0 && m.IID>>32 == 0xffff {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(m.IID))
		return netip.AddrFrom4(b)
	}
	return smip
}

// IAPrefix is the upper 64 bits of the SM-IP addresses of an ISD-AS with
// local prefix 0, and how many of the local prefix's bits follow the AS.
func IAPrefix(ia addr.IA) (uint64, int, error) {
	isd, as := ia.ISD(), ia.AS()
	if isd > MaxISD {
		return 0, 0, fmt.Errorf("%s: ISD %d is more than an SM-IP address holds (%d): %w", ia, isd, MaxISD, ErrNotMappable)
	}
	hi := uint64(smipPrefix)<<56 | uint64(isd)<<44
	switch {
	case as <= MaxBGPASN:
		return hi | uint64(as)<<24, 24, nil
	case as >= firstPublicAS && as <= lastPublicAS:
		return hi | publicForm<<40 | uint64(as&0xffffffff)<<8, 8, nil
	}
	return 0, 0, fmt.Errorf("%s: AS %s is neither a BGP-style ASN below %d nor a public SCION ASN from 2:0:0 to 2:ffff:ffff: %w", ia, as, MaxBGPASN+1, ErrNotMappable)
}

// FromSCION maps a SCION address to its SM-IP address: an IPv4 host to
// local prefix 0 and IID 0:ffff:<IPv4>; an IPv6 host must be an SM-IP
// address of the same ISD-AS (it is its own mapping).
func FromSCION(ia addr.IA, host netip.Addr) (netip.Addr, error) {
	hi, _, err := IAPrefix(ia)
	if err != nil {
		return netip.Addr{}, err
	}
	switch {
	case host.Is4() || host.Is4In6():
		v4 := host.Unmap().As4()
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], hi)
		binary.BigEndian.PutUint64(b[8:], 0xffff<<32|uint64(binary.BigEndian.Uint32(v4[:])))
		return netip.AddrFrom16(b), nil
	case host.Is6():
		m, err := ToSCION(host)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%s,%s: an IPv6 host's address must be SCION-mapped itself: %w", ia, host, err)
		}
		if m.IA != ia {
			return netip.Addr{}, fmt.Errorf("%s,%s: the address maps to %s, not %s: %w", ia, host, m.IA, ia, ErrNotMappable)
		}
		return host, nil
	}
	return netip.Addr{}, fmt.Errorf("%s: no host address: %w", ia, ErrNotMappable)
}

// ToSCION reads an SM-IP address.
func ToSCION(a netip.Addr) (Mapping, error) {
	if !a.Is6() || a.Is4In6() {
		return Mapping{}, fmt.Errorf("%s: not IPv6: %w", a, ErrNotSMIP)
	}
	b := a.As16()
	hi := binary.BigEndian.Uint64(b[:8])
	if hi>>56 != smipPrefix {
		return Mapping{}, fmt.Errorf("%s: the prefix is not fc00::/8: %w", a, ErrNotSMIP)
	}
	isd := addr.ISD(hi >> 44 & 0xfff)
	field := hi >> 40 & 0xf
	var as addr.AS
	var local uint32
	switch {
	case field&0x8 == 0:
		as = addr.AS(hi >> 24 & 0xfffff)
		local = uint32(hi & 0xffffff)
	case field == publicForm:
		as = firstPublicAS | addr.AS(hi>>8&0xffffffff)
		local = uint32(hi & 0xff)
	default:
		return Mapping{}, fmt.Errorf("%s: form %#x is reserved: %w", a, field, ErrNotSMIP)
	}
	ia, err := addr.IAFrom(isd, as)
	if err != nil {
		return Mapping{}, fmt.Errorf("%s: %v: %w", a, err, ErrNotSMIP)
	}
	return Mapping{IA: ia, Local: local, IID: binary.BigEndian.Uint64(b[8:])}, nil
}

// ParseSCION reads a SCION address as `ISD-AS,HOST` (HOST an IPv4 or IPv6
// address, brackets allowed), or `ISD-AS,::IID`, the AS's SM-IP address
// with that interface identifier and local prefix 0.
func ParseSCION(s string) (addr.IA, netip.Addr, error) {
	iaPart, hostPart, ok := strings.Cut(s, ",")
	if !ok {
		return 0, netip.Addr{}, fmt.Errorf("%q: want ISD-AS,HOST (1-64512,10.0.0.1) or ISD-AS,::IID", s)
	}
	ia, err := addr.ParseIA(iaPart)
	if err != nil {
		return 0, netip.Addr{}, fmt.Errorf("%q: %v", s, err)
	}
	hostPart = strings.TrimSuffix(strings.TrimPrefix(hostPart, "["), "]")
	host, err := netip.ParseAddr(hostPart)
	if err != nil {
		return 0, netip.Addr{}, fmt.Errorf("%q: bad host address %q", s, hostPart)
	}
	if host.Zone() != "" {
		return 0, netip.Addr{}, fmt.Errorf("%q: a SCION host address has no zone", s)
	}
	// ::IID: the upper 64 bits zero stand for the AS's prefix.
	if b := host.As16(); host.Is6() && !host.Is4In6() && binary.BigEndian.Uint64(b[:8]) == 0 {
		hi, _, err := IAPrefix(ia)
		if err != nil {
			return 0, netip.Addr{}, err
		}
		binary.BigEndian.PutUint64(b[:8], hi)
		host = netip.AddrFrom16(b)
	}
	return ia, host, nil
}

package lab

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseSizes(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []int
		err  string
	}{
		"one":          {in: "138", want: []int{138}},
		"several":      {in: "138,576,1500", want: []int{138, 576, 1500}},
		"spaces":       {in: " 138 , 576", want: []int{138, 576}},
		"kept order":   {in: "1500,138", want: []int{1500, 138}},
		"empty":        {in: "", err: `--size "": want frame lengths in bytes`},
		"not a number": {in: "138,5x6", err: `--size "138,5x6"`},
		"zero":         {in: "0", err: `--size "0"`},
		"negative":     {in: "-64", err: `--size "-64"`},
		"empty item":   {in: "138,,576", err: `--size "138,,576"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSizes(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestDryRunPackets(t *testing.T) {
	frames := func(n int) func(Testbed, int) ([][]byte, error) {
		return func(Testbed, int) ([][]byte, error) { return [][]byte{make([]byte, 60), make([]byte, n)}, nil }
	}
	tests := map[string]struct {
		s    Scenario
		size int // 1500 if 0
		err  string
	}{
		"default packets":     {Scenario{Layout: LayoutDUT}, 0, ""},
		"own packets fit":     {Scenario{Layout: LayoutDUT, Packets: frames(1514)}, 0, ""},
		"own packets too big": {Scenario{Layout: LayoutDUT, Packets: frames(1515)}, 0, "its frames are 1515 bytes at this size, longer than the lab's veths take"},
		"builder fails":       {Scenario{Layout: LayoutDUT, Packets: func(Testbed, int) ([][]byte, error) { return nil, errors.New("no such path") }}, 0, "no such path"},
		"builder makes none":  {Scenario{Layout: LayoutDUT, Packets: func(Testbed, int) ([][]byte, error) { return nil, nil }}, 0, "made no packets"},
		// Packets of a fixture's network cannot be made before it exists.
		"fixture left alone":   {Scenario{Layout: LayoutNone, Fixture: "net", Packets: frames(9000)}, 0, ""},
		"routed at 1500 bytes": {Scenario{Layout: LayoutDUT, Packets: RoutedUDP}, 0, ""},
		// Over 1514 bytes the testbed has a jumbo MTU.
		"jumbo fits":    {Scenario{Layout: LayoutDUT, Packets: frames(9014)}, 8000, ""},
		"jumbo too big": {Scenario{Layout: LayoutDUT, Packets: frames(9015)}, 8000, "its frames are 9015 bytes at this size, longer than the lab's veths take at it (MTU 9000"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = 1500
			}
			err := dryRunPackets(tc.s, Testbed{Prefix: "fp-", Layout: tc.s.Layout}, size)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestCountCPUList(t *testing.T) {
	tests := map[string]struct {
		list string
		want int
		err  bool
	}{
		"one":         {list: "0", want: 1},
		"range":       {list: "0-1", want: 2},
		"mixed":       {list: "0-3,8,10-11", want: 7},
		"empty":       {list: "", err: true},
		"backwards":   {list: "3-1", err: true},
		"not a range": {list: "0-x", err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := countCPUList(tc.list)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("countCPUList(%q) = %d, %v; want %d, error %v", tc.list, got, err, tc.want, tc.err)
			}
		})
	}
}

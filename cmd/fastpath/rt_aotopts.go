package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/fastpath-dev/fastpath/internal/rt"
)

// rtBenchAOTOpts is fastpath rt bench --aot-opts: each benchmark program
// as AOT objects compiled with each option set.
func rtBenchAOTOpts(o rt.BenchOptions, jsonOut, mdOut string) error {
	rows, err := rt.BenchAOTOpts(o)
	if err != nil {
		return err
	}
	fmt.Print(rt.AOTOptTable(rows, false))
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if mdOut != "" {
		return os.WriteFile(mdOut, []byte("# fastpath rt bench --aot-opts\n\n"+rt.AOTOptTable(rows, true)), 0o644)
	}
	return nil
}

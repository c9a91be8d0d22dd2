package br

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// labConf is the lab's router configuration: AS 1-ff00:0:110 with a child
// link towards the generator (fp-veth1) and a parent link towards the sink
// (fp-veth3), on the lab testbed's addresses.
//
//go:embed labconf
var labConf embed.FS

// WriteLabConfig writes the lab's router configuration into dir and returns
// the path of its br.toml.
func WriteLabConfig(dir string) (string, error) {
	err := fs.WalkDir(labConf, "labconf", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("labconf", p)
		dst := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := labConf.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
	if err != nil {
		return "", fmt.Errorf("write lab router configuration: %w", err)
	}
	return filepath.Join(dir, "br.toml"), nil
}

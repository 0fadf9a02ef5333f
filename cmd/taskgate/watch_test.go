package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The watcher sees a file rewritten in place, replaced by rename, and a
// ConfigMap-style ..data symlink swap; an unchanged file reloads nothing.
func TestFileWatcherChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// dir/policy.yaml -> ..data/policy.yaml, ..data -> v1
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(dir, v, "policy.yaml"), "version "+v+"\n")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("v1", filepath.Join(dir, "..data")))
	must(os.Symlink(filepath.Join("..data", "policy.yaml"), filepath.Join(dir, "policy.yaml")))
	plain := filepath.Join(dir, "plain.yaml")
	write(plain, "a\n")

	var w fileWatcher
	reloads := map[string]int{}
	w.add(func() { reloads["cm"]++ }, filepath.Join(dir, "policy.yaml"))
	w.add(func() { reloads["plain"]++ }, plain, "")
	w.check()
	if len(reloads) != 0 {
		t.Fatalf("reloads without a change: %v", reloads)
	}
	// The kubelet's update: a new ..data symlink renamed over the old one.
	must(os.Symlink("v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	w.check()
	if reloads["cm"] != 1 || reloads["plain"] != 0 {
		t.Fatalf("after the ..data swap: %v; want cm 1", reloads)
	}
	// Rewritten in place with another size, then replaced by rename.
	write(plain, "bb\n")
	w.check()
	tmp := filepath.Join(dir, "plain.tmp")
	write(tmp, "cc\n")
	must(os.Rename(tmp, plain))
	w.check()
	w.check()
	if reloads["plain"] != 2 || reloads["cm"] != 1 {
		t.Fatalf("after two changes of plain.yaml: %v; want plain 2, cm 1", reloads)
	}
	// Gone, then back.
	must(os.Remove(plain))
	w.check()
	write(plain, "d\n")
	w.check()
	if reloads["plain"] != 4 {
		t.Errorf("after removal and return: %v; want plain 4", reloads)
	}
}

package fsys

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Walk visits every entry below dir, depth first, without following
// symbolic links. A folder that goes away while it is walked is skipped:
// the walkers (listings, sweeps) run while sessions come and go.
func Walk(fsys interface {
	ReadDir(string) ([]fs.DirEntry, error)
}, dir string, fn func(path string, d fs.DirEntry) error) error {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, d := range ents {
		p := filepath.Join(dir, d.Name())
		if err := fn(p, d); err != nil {
			return err
		}
		if d.IsDir() {
			if err := Walk(fsys, p, fn); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

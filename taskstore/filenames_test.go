package taskstore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mixedFiles are the files that still hold both a shared part and one
// store's code, and what to move out of them before they get a prefix.
var mixedFiles = map[string]string{
	"admin.go":    "the Admin contract and cursor helpers; the Embedded methods belong in embedded_admin.go",
	"inputs.go":   "the Inputs contract; the Redis half belongs in redis_inputs.go, the Embedded half in embedded_inputs.go",
	"list.go":     "the list cursors both stores seal; Redis.List belongs in redis_list.go",
	"sessions.go": "the SessionRecords contract; the scripts, Redis methods and lazyCalls belong in redis_sessions.go",
}

// A file's name says which store it belongs to: a file that speaks
// go-redis or has methods of Redis is named redis*.go, one with methods of
// Embedded is named embedded*.go, and neither holds the other store's
// code. Shared files (the contract, ids, keys, the key gate) have no
// prefix.
func TestFileNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		usesRedis, usesEmbedded := false, false
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/redis/go-redis/") {
				usesRedis = true
			}
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			typ := fd.Recv.List[0].Type
			if st, ok := typ.(*ast.StarExpr); ok {
				typ = st.X
			}
			switch id, _ := typ.(*ast.Ident); {
			case id == nil:
			case id.Name == "Redis":
				usesRedis = true
			case id.Name == "Embedded":
				usesEmbedded = true
			}
		}
		if _, ok := mixedFiles[name]; ok {
			continue
		}
		isRedis, isEmbedded := strings.HasPrefix(name, "redis"), strings.HasPrefix(name, "embedded")
		switch {
		case usesRedis && usesEmbedded:
			t.Errorf("%s holds code of both stores: split it into redis_*.go and embedded_*.go", name)
		case usesRedis && !isRedis:
			t.Errorf("%s is Redis code: name it redis_%s", name, name)
		case usesEmbedded && !isEmbedded:
			t.Errorf("%s is embedded-store code: name it embedded_%s", name, name)
		case isRedis && usesEmbedded, isEmbedded && usesRedis:
			t.Errorf("%s holds the other store's code", name)
		}
	}
}

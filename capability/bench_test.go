package capability

import "testing"

func BenchmarkRewriteToolsList(b *testing.B) {
	msg := bigToolsList(100)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RewriteToolsList(msg, optional); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRewriteInitialize(b *testing.B) {
	msg := []byte(goSDKInit)
	opt := InitOptions{List: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := RewriteInitialize(msg, opt); err != nil {
			b.Fatal(err)
		}
	}
}

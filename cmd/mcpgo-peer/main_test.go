package main

import (
	"flag"
	"strings"
	"testing"
)

// TestHelpSaysDevTool: --help says what mcpgo-peer is and that it is a
// development tool, before the flags.
func TestHelpSaysDevTool(t *testing.T) {
	var out strings.Builder
	fs := flag.CommandLine
	fs.SetOutput(&out)
	defer fs.SetOutput(nil)
	fs.Bool("no-tasks", false, "a flag for the listing")
	usage()
	help := out.String()
	if !strings.HasPrefix(help, "mcpgo-peer: an MCP server on mcp-go") || !strings.Contains(help, "A development tool of taskgate, not part of the product.") ||
		!strings.Contains(help, "-no-tasks") {
		t.Errorf("--help:\n%s", help)
	}
}

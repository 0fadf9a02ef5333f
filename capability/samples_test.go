package capability

import (
	"fmt"
	"strings"
)

// Initialize results shaped as the SDKs produce them.
const (
	// goSDKInit is what github.com/modelcontextprotocol/go-sdk marshals:
	// InitializeResult and ServerCapabilities members in struct order.
	goSDKInit = `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"completions":{},"experimental":{"acme.dev/audit":{"enabled":true}},"logging":{},"prompts":{"listChanged":true},"resources":{"listChanged":true,"subscribe":true},"tools":{"listChanged":true}},"instructions":"Call search before fetch.","protocolVersion":"2025-11-25","serverInfo":{"name":"legacy-mcp","title":"Legacy MCP Server","version":"v1.4.0"}}}`

	// tsSDKInit is what the TypeScript SDK (v1.x) sends: protocolVersion
	// first, string id.
	tsSDKInit = `{"result":{"protocolVersion":"2025-06-18","capabilities":{"logging":{},"tools":{"listChanged":true},"prompts":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},"completions":{},"experimental":{"x-trace":{}}},"serverInfo":{"name":"ts-server","title":"TS Server","version":"0.9.1"},"instructions":"Be nice."},"jsonrpc":"2.0","id":"init-0"}`

	// prettyInit is a pretty-printed result with _meta and unknown members.
	prettyInit = `{
  "jsonrpc": "2.0",
  "id": 7,
  "result": {
    "_meta": {"vendor/trace": "abc"},
    "protocolVersion": "2025-11-25",
    "capabilities": {
      "tools": {}
    },
    "serverInfo": {"name": "py", "version": "1.0"},
    "x-unknown": [1, 2.50, {"a": null}]
  }
}
`
)

// Tools lists shaped as the SDKs produce them.
const (
	// goSDKTools is a Go SDK page: Tool members in struct order, with
	// _meta, annotations, outputSchema and icons, and a nextCursor.
	goSDKTools = `{"jsonrpc":"2.0","id":2,"result":{"nextCursor":"eyJwIjoyfQ==","tools":[` +
		`{"_meta":{"acme.dev/cost":3},"annotations":{"readOnlyHint":true,"openWorldHint":false,"title":"Search"},"description":"Full-text search.","inputSchema":{"type":"object","properties":{"query":{"type":"string","description":"Query \"text\""},"limit":{"type":"integer","minimum":1,"maximum":100}},"required":["query"],"additionalProperties":false},"name":"search","outputSchema":{"type":"object","properties":{"hits":{"type":"array","items":{"type":"string"}}},"required":["hits"]},"title":"Search","icons":[{"src":"https://example.com/s.png","mimeType":"image/png","sizes":["48x48"]}]},` +
		`{"description":"Fetch a URL.","inputSchema":{"type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"]},"name":"fetch"}` +
		`]}}`

	// tsSDKTools is a TypeScript SDK (v1.x) page whose tools already carry
	// execution.taskSupport "forbidden", and a result _meta.
	tsSDKTools = `{"result":{"tools":[` +
		`{"name":"build_report","title":"Build report","description":"Slow.","inputSchema":{"type":"object","properties":{"year":{"type":"number"}},"required":["year"],"$schema":"http://json-schema.org/draft-07/schema#"},"execution":{"taskSupport":"forbidden"}},` +
		`{"name":"echo","inputSchema":{"type":"object"},"execution":{"taskSupport":"forbidden"},"annotations":{"idempotentHint":true}}` +
		`],"_meta":{"page":1}},"jsonrpc":"2.0","id":"list-1"}`

	// prettyTools is pretty-printed, with unknown members everywhere.
	prettyTools = `{
  "jsonrpc": "2.0",
  "id": 3,
  "result": {
    "tools": [
      {
        "name": "a",
        "inputSchema": { "type": "object" },
        "x-extra": true
      },
      {
        "name": "b",
        "execution": { "x-mode": "fast" },
        "inputSchema": {}
      }
    ],
    "nextCursor": "2",
    "x-unknown": null
  }
}`
)

// bigToolsList returns a tools/list response with n tools with realistic
// input and output schemas (about 1.3 KB per tool).
func bigToolsList(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":42,"result":{"tools":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%03d","title":"Tool %d","description":"Runs operation %d against the legacy inventory system. Use it when the user asks about stock levels, \"reservations\" or shipments.",`, i, i, i)
		b.WriteString(`"inputSchema":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{6}$","description":"Stock keeping unit"},"warehouse":{"type":"string","enum":["north","south","east","west"]},"quantity":{"type":"integer","minimum":1,"maximum":10000},"options":{"type":"object","properties":{"dryRun":{"type":"boolean","default":false},"priority":{"type":"string","enum":["low","normal","high"]},"tags":{"type":"array","items":{"type":"string"},"maxItems":20}},"additionalProperties":false}},"required":["sku","warehouse"],"additionalProperties":false,"$schema":"https://json-schema.org/draft/2020-12/schema"},`)
		b.WriteString(`"outputSchema":{"type":"object","properties":{"status":{"type":"string"},"reserved":{"type":"integer"},"eta":{"type":"string","format":"date-time"},"warnings":{"type":"array","items":{"type":"object","properties":{"code":{"type":"string"},"message":{"type":"string"}}}}},"required":["status"]},`)
		b.WriteString(`"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}`)
		if i%3 == 0 {
			b.WriteString(`,"execution":{"taskSupport":"forbidden"}`)
		}
		b.WriteByte('}')
	}
	b.WriteString(`],"nextCursor":"cursor-2"}}`)
	return []byte(b.String())
}

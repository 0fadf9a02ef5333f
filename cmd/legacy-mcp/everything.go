package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The everything set (--everything) is what the server scenarios of the
// official MCP conformance suite's 2025-era releases (0.1.x) call: tools
// named test_*, the resources test://static-text, test://static-binary,
// test://watched-resource and the template test://template/{id}/data,
// prompts named test_*, completions and resource subscriptions. Each one
// answers what those scenarios expect of a plain 2025-11-25 server; none
// has anything to do with tasks, so taskgate in front of it must pass them
// through unchanged.

// redPixelPNG is a 1x1 red PNG.
const redPixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

// silentWAV returns a WAV file of 8 silent 8-bit mono samples at 8 kHz.
func silentWAV() []byte {
	const samples = 8
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + samples))
	b.WriteString("WAVEfmt ")
	le(uint32(16))   // fmt chunk size
	le(uint16(1))    // PCM
	le(uint16(1))    // mono
	le(uint32(8000)) // sample rate
	le(uint32(8000)) // byte rate
	le(uint16(1))    // block align
	le(uint16(8))    // bits per sample
	b.WriteString("data")
	le(uint32(samples))
	b.Write(bytes.Repeat([]byte{0x80}, samples))
	return b.Bytes()
}

func pngBytes() []byte {
	b, err := base64.StdEncoding.DecodeString(redPixelPNG)
	if err != nil {
		panic("legacy-mcp: bad built-in PNG")
	}
	return b
}

// everything holds the subscription state of the everything set.
type everything struct {
	mu   sync.Mutex
	subs map[string]bool // subscribed resource URIs
}

// options adds the completion and subscription handlers of the
// everything set to opts.
func (e *everything) options(opts *mcp.ServerOptions) {
	opts.CompletionHandler = e.complete
	opts.SubscribeHandler = func(_ context.Context, req *mcp.SubscribeRequest) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.subs[req.Params.URI] = true
		return nil
	}
	opts.UnsubscribeHandler = func(_ context.Context, req *mcp.UnsubscribeRequest) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.subs, req.Params.URI)
		return nil
	}
}

// completionWords are what completion/complete offers for any argument.
var completionWords = []string{"paris", "park", "party", "test", "testing"}

// complete offers the completion words that start with the typed value.
func (e *everything) complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	values := []string{}
	if req.Params != nil && req.Params.Argument.Name != "" {
		for _, w := range completionWords {
			if strings.HasPrefix(w, req.Params.Argument.Value) {
				values = append(values, w)
			}
		}
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
}

type noArgs struct{}

type promptIn struct {
	Prompt string `json:"prompt"`
}

type messageIn struct {
	Message string `json:"message"`
}

// addEverything registers the everything set on s.
func addEverything(t *tools, s *mcp.Server) {
	empty := rawSchema(`{"type": "object", "additionalProperties": false}`)
	fixed := func(name, desc string, res func() *mcp.CallToolResult) {
		addTool(t, s, &mcp.Tool{Name: name, Description: desc, InputSchema: empty},
			func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
				return res(), nil, nil
			})
	}
	fixed("test_simple_text", "Returns one text content.", func() *mcp.CallToolResult {
		return textResult("This is a simple text response for testing.")
	})
	fixed("test_image_content", "Returns one image content (a 1x1 PNG).", func() *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: pngBytes(), MIMEType: "image/png"}}}
	})
	fixed("test_audio_content", "Returns one audio content (a short silent WAV).", func() *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: silentWAV(), MIMEType: "audio/wav"}}}
	})
	fixed("test_embedded_resource", "Returns one embedded text resource.", func() *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content."}}}}
	})
	fixed("test_multiple_content_types", "Returns a text, an image and an embedded resource.", func() *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "Multiple content types test:"},
			&mcp.ImageContent{Data: pngBytes(), MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`}},
		}}
	})
	fixed("test_error_handling", "Always fails: a tool result with isError true.", func() *mcp.CallToolResult {
		return errorResult("This tool intentionally returns an error for testing")
	})
	addTool(t, s, &mcp.Tool{Name: "test_tool_with_logging", InputSchema: empty,
		Description: "Sends three info log messages about 50 ms apart, then returns a text."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
				if i > 0 {
					if err := t.work(ctx, 50*time.Millisecond); err != nil {
						return nil, nil, err
					}
				}
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "test_tool_with_logging", Data: msg})
			}
			return textResult("Tool with logging executed successfully"), nil, nil
		})
	addTool(t, s, &mcp.Tool{Name: "test_tool_with_progress", InputSchema: empty,
		Description: "Reports progress 0, 50 and 100 of 100 about 50 ms apart (when the call has a progressToken), then returns a text."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			token := req.Params.GetProgressToken()
			for i, p := range []float64{0, 50, 100} {
				if i > 0 {
					if err := t.work(ctx, 50*time.Millisecond); err != nil {
						return nil, nil, err
					}
				}
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p, Total: 100})
				}
			}
			return textResult("Tool with progress executed successfully"), nil, nil
		})
	addTool(t, s, &mcp.Tool{Name: "test_sampling",
		Description: `Asks the client to sample a reply to the prompt (maxTokens 100) and returns "LLM response: <reply>".`,
		InputSchema: rawSchema(`{"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}`)},
		func(ctx context.Context, req *mcp.CallToolRequest, in promptIn) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}},
				MaxTokens: 100,
			})
			if err != nil {
				return nil, nil, fmt.Errorf("sampling failed: %w", err)
			}
			text := ""
			if tc, ok := res.Content.(*mcp.TextContent); ok {
				text = tc.Text
			}
			return textResult("LLM response: " + text), nil, nil
		})
	addTool(t, s, &mcp.Tool{Name: "test_elicitation",
		Description: `Asks the client for a username and an email (form elicitation with the given message) and returns "User response: ...".`,
		InputSchema: rawSchema(`{"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}`)},
		func(ctx context.Context, req *mcp.CallToolRequest, in messageIn) (*mcp.CallToolResult, any, error) {
			return elicitText(ctx, req, "User response: ", &mcp.ElicitParams{Message: in.Message, RequestedSchema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"username": map[string]any{"type": "string", "description": "User's response"},
					"email":    map[string]any{"type": "string", "description": "User's email address"},
				},
				"required": []string{"username", "email"},
			}})
		})
	addTool(t, s, &mcp.Tool{Name: "test_elicitation_sep1034_defaults", InputSchema: empty,
		Description: "Asks the client a form whose fields of every primitive type have defaults, and returns the answer."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			return elicitText(ctx, req, "Elicitation completed: ", &mcp.ElicitParams{
				Message: "Please review and update the form fields with defaults",
				RequestedSchema: map[string]any{
					"type": "object",
					"properties": map[string]any{
						"name":     map[string]any{"type": "string", "description": "User name", "default": "John Doe"},
						"age":      map[string]any{"type": "integer", "description": "User age", "default": 30},
						"score":    map[string]any{"type": "number", "description": "User score", "default": 95.5},
						"status":   map[string]any{"type": "string", "description": "User status", "enum": []string{"active", "inactive", "pending"}, "default": "active"},
						"verified": map[string]any{"type": "boolean", "description": "Verification status", "default": true},
					},
				}})
		})
	addTool(t, s, &mcp.Tool{Name: "test_elicitation_sep1330_enums", InputSchema: empty,
		Description: "Asks the client a form with the five kinds of enum fields, and returns the answer."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			titled := func(prefix string, titles ...string) []any {
				out := make([]any, len(titles))
				for i, title := range titles {
					out[i] = map[string]any{"const": fmt.Sprintf("%s%d", prefix, i+1), "title": title}
				}
				return out
			}
			return elicitText(ctx, req, "Elicitation completed: ", &mcp.ElicitParams{
				Message: "Please select options from the enum fields",
				RequestedSchema: map[string]any{
					"type": "object",
					"properties": map[string]any{
						"untitledSingle": map[string]any{"type": "string", "description": "Select one option",
							"enum": []string{"option1", "option2", "option3"}},
						"titledSingle": map[string]any{"type": "string", "description": "Select one option with titles",
							"oneOf": titled("value", "First Option", "Second Option", "Third Option")},
						"legacyEnum": map[string]any{"type": "string", "description": "Select one option (legacy)",
							"enum": []string{"opt1", "opt2", "opt3"}, "enumNames": []string{"Option One", "Option Two", "Option Three"}},
						"untitledMulti": map[string]any{"type": "array", "description": "Select multiple options",
							"items": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}}},
						"titledMulti": map[string]any{"type": "array", "description": "Select multiple options with titles",
							"items": map[string]any{"anyOf": titled("value", "First Choice", "Second Choice", "Third Choice")}},
					},
				}})
		})
	addTool(t, s, &mcp.Tool{Name: "json_schema_2020_12_tool", Description: "Tool with JSON Schema 2020-12 features",
		InputSchema: rawSchema(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
			"properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
			"additionalProperties": false
		}`)},
		func(_ context.Context, _ *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
			b, _ := json.Marshal(in)
			return textResult("received: " + string(b)), nil, nil
		})

	text := func(uri, mime, body string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: body}}}
	}
	s.AddResource(&mcp.Resource{URI: "test://static-text", Name: "static-text", MIMEType: "text/plain",
		Description: "A static text resource."},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text("test://static-text", "text/plain", "This is the content of the static text resource."), nil
		})
	s.AddResource(&mcp.Resource{URI: "test://static-binary", Name: "static-binary", MIMEType: "image/png",
		Description: "A static binary resource (a 1x1 PNG)."},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://static-binary", MIMEType: "image/png", Blob: pngBytes()}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: "test://watched-resource", Name: "watched-resource", MIMEType: "text/plain",
		Description: "A resource clients may subscribe to."},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text("test://watched-resource", "text/plain", "Watched resource content."), nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://template/{id}/data", Name: "template-data",
		MIMEType: "application/json", Description: "Data for the given id."},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			uri := req.Params.URI
			id := strings.TrimSuffix(strings.TrimPrefix(uri, "test://template/"), "/data")
			b, _ := json.Marshal(map[string]any{"id": id, "templateTest": true, "data": "Data for ID: " + id})
			return text(uri, "application/json", string(b)), nil
		})

	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }
	s.AddPrompt(&mcp.Prompt{Name: "test_simple_prompt", Description: "A prompt without arguments."},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{user(&mcp.TextContent{Text: "This is a simple prompt for testing."})}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_arguments", Description: "A prompt with two arguments.",
		Arguments: []*mcp.PromptArgument{
			{Name: "arg1", Description: "First test argument", Required: true},
			{Name: "arg2", Description: "Second test argument", Required: true},
		}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			a := req.Params.Arguments
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{user(&mcp.TextContent{
				Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"])})}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_embedded_resource", Description: "A prompt embedding the given resource.",
		Arguments: []*mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: req.Params.Arguments["resourceUri"],
					MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
				user(&mcp.TextContent{Text: "Please process the embedded resource above."}),
			}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_image", Description: "A prompt with an image."},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				user(&mcp.ImageContent{Data: pngBytes(), MIMEType: "image/png"}),
				user(&mcp.TextContent{Text: "Please analyze the image above."}),
			}}, nil
		})
}

// elicitText asks the client p and returns prefix followed by the answer's
// action and content.
func elicitText(ctx context.Context, req *mcp.CallToolRequest, prefix string, p *mcp.ElicitParams) (*mcp.CallToolResult, any, error) {
	res, err := req.Session.Elicit(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("elicitation failed: %w", err)
	}
	b, _ := json.Marshal(res.Content)
	return textResult(fmt.Sprintf("%saction=%s, content=%s", prefix, res.Action, b)), nil, nil
}

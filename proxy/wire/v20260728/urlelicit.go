package v20260728

import (
	"encoding/json"
	"strconv"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire/v20260728/schema"
)

// The 2025 error -32042 (URL elicitation required) does not exist at
// 2026-07-28 (M-12): a 2026 client is asked to open the URLs as URL-mode
// elicitation/create input requests of an InputRequiredResult, and retries
// the call once done (the upstream learns of the visit out of band, so the
// retry is a new call). The 2026 URL elicitation has mode, message and url
// only: the 2025 elicitationId is dropped. A client that did not declare
// elicitation gets -32021 naming it; a task whose call failed with -32042
// reads as failed with -32603 and the upstream's message and data.

// codeURLElicitationRequired is the 2025 error for a call that needs the
// user to visit URLs first.
const codeURLElicitationRequired = -32042

// urlElicitationRequests returns the 2026 inputRequests of a -32042 error
// object: one URL-mode elicitation/create per elicitation its data lists,
// keyed url-1, url-2, ... It reports false for any other error, or one
// listing no URL elicitation.
func urlElicitationRequests(errObj []byte) ([]byte, bool) {
	var e struct {
		Code int `json:"code"`
		Data struct {
			Elicitations []struct {
				Mode    string `json:"mode"`
				Message string `json:"message"`
				URL     string `json:"url"`
			} `json:"elicitations"`
		} `json:"data"`
	}
	if json.Unmarshal(errObj, &e) != nil || e.Code != codeURLElicitationRequired {
		return nil, false
	}
	type params struct {
		Mode    string `json:"mode"`
		Message string `json:"message"`
		URL     string `json:"url"`
	}
	type request struct {
		Method string `json:"method"`
		Params params `json:"params"`
	}
	reqs := map[string]request{}
	for _, el := range e.Data.Elicitations {
		if el.URL == "" || (el.Mode != "" && el.Mode != "url") {
			continue
		}
		reqs["url-"+strconv.Itoa(len(reqs)+1)] = request{"elicitation/create", params{"url", el.Message, el.URL}}
	}
	if len(reqs) == 0 {
		return nil, false
	}
	b, err := json.Marshal(reqs)
	return b, err == nil
}

// urlElicitationAnswer renders a -32042 error object errObj for a plain
// 2026 call: the InputRequiredResult asking for the URLs (a result), or
// for a request without elicitation the -32021 error that names it. ok is
// false when errObj is not a -32042 with URLs.
func urlElicitationAnswer(errObj []byte, m *reqMeta) (result, missingData []byte, ok bool) {
	reqs, ok := urlElicitationRequests(errObj)
	if !ok {
		return nil, nil, false
	}
	if m == nil || !m.elicitation {
		return nil, []byte(`{"requiredCapabilities":{"elicitation":{"url":{}}}}`), true
	}
	return schema.AppendInputRequired(nil, reqs, ""), nil, true
}

// failedTaskError is the error object a failed task shows on the 2026
// wire: the upstream's, except that -32042 becomes -32603 with the same
// message and data.
func failedTaskError(errObj []byte) []byte {
	if errorCodeOf([]byte(`{"error":`+string(errObj)+`}`)) != codeURLElicitationRequired {
		return errObj
	}
	if out, err := jsonx.SetMember(errObj, "code", []byte(strconv.Itoa(wire.CodeInternalError))); err == nil {
		return out
	}
	return errObj
}

// Package jsonx is taskgate's one strict JSON scanner and editor, used by
// proxy, capability and proxy/stdio. It reads JSON in place, without
// decoding into Go values, so that what is forwarded stays byte for byte
// what was received except where taskgate edits it.
//
// Grammar: exactly RFC 8259 (the grammar encoding/json accepts), with a
// nesting limit: MaxDepth for a Scanner by default, EncodingJSONDepth for
// callers that must accept what json.Valid accepts (ValidDepth). Strings
// are not checked for UTF-8; decoded names (Unquote) are what encoding/json
// decodes: invalid UTF-8 and lone surrogates become U+FFFD.
//
// Member names are always compared after unescaping ("m\u0065thod" is
// "method"). There are two rules for duplicates and case, one per use,
// each a separate function because the uses need different things:
//
//   - Members (the wanted-names rule), for what the proxy routes on in
//     messages it forwards: names match exactly; a wanted name twice is
//     ErrDupMember, and a member equal to a wanted name only under Unicode
//     case folding is ErrOddMember. Upstreams built on encoding/json match
//     member names case-insensitively and take the last duplicate, so a
//     message that reads one way here could read another way there. Other
//     members are not looked at. The JSON-RPC envelope parser of package
//     proxy applies the same rule to the six envelope members.
//   - ScanObject (the whole-object rule), for rewriting an answer in place
//     (capability): every key of the object is checked, any key twice is
//     a *DupKeyError, and keys match exactly, case included: "tasks" and
//     "Tasks" are different members for the client that reads the answer,
//     and a rewrite edits one member while no second member of the same
//     name may remain for a reader to take instead.
//
// Editing: SetMember and DeleteMember rebuild one object (validating it);
// ScanObject with Splice edits a message already validated, keeping every
// byte outside the edits.
//
// Kind and Classify name what a JSON-RPC message is (request,
// notification, response, batch); every JSON-RPC reader classifies with
// them.
package jsonx

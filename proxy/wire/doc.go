// Package wire is the seam between taskgate's front (package proxy) and
// its wire eras: one package per protocol revision, named by it
// (v20251125, v20260728). The front owns the HTTP side (dispatch,
// pass-through, the owner and session identity); the task engine (package
// proxy/engine) owns the tasks; an era owns what its revision puts on the
// wire: which methods it serves and how it parses and renders them, and
// what happens during a background call.
//
// # What the front gives an era
//
// Front: the engine, the store, the upstream client, the settings the
// eras read (Config), and hooks into the front's own work (Pass, Forward,
// Owner, KeyedHash, BeginStream, ...). Beside it this package holds what
// every era shares: the strict envelope parser (ParseEnvelope), the method
// table (names, metric labels, batch and trace flags: Lookup), the one
// writer of JSON-RPC responses (AppendError, AppendResult, HTTPError,
// RPCError), the request's log record (Info), the task call (Job), the
// reading of an upstream call's JSON or SSE answer (Front.CallUpstreamOnce,
// Classify) and the task helpers both eras use (Front.ReserveTaskCall,
// Front.StoreTask, Front.AllowTaskOp, Front.StoreError).
//
// # What an era implements
//
// A third era is one new package (proxy/wire/vYYYYMMDD) and one line in
// proxy/eras.go, where the eras are listed in the order the front asks
// them. The package implements:
//
//  1. Era.Serve: recognise its own requests (the front hands every
//     request of the MCP endpoint to the eras in order: a POST with its
//     parsed envelope, a GET or DELETE without one) and serve them; its
//     column of the method table is its switch on the method. It reports
//     false for a request that is not its own, or that it leaves to
//     pass-through. Era.Close stops what the era started.
//  2. Call, for each task call it creates (the Call of the wire.Job it
//     hands to the engine with Front.StoreTask): Run performs the upstream
//     call; Notification and Request deliver what the upstream sends
//     during it; Answers hands the client's answers to the upstream;
//     Stopped tells the upstream the call was stopped; End releases the
//     era's per-call state. A Call that implements Sender has its request
//     written before Run.
//  3. A rule in proxy/imports_test.go: the era imports no other era.
//
// The engine never sees an era: it calls the Runner (engine.Upstream),
// which delegates to the job's Call.
package wire

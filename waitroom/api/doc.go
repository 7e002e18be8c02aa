// Package api is the waiting room's HTTP adapter: the JSON API over a
// waitroom.Service (rooms, tickets, the online admission check), the
// waiting page, the OpenAPI description, the JWKS of the admission tokens,
// the per-address join limit and the HTTP side of proof of work.
//
// Server composes one waiting-room instance on a store: Config,
// DefaultConfig, Validate, New (which starts nothing) and Run (which
// admits until its context ends). A Server is an http.Handler; an
// application embedding the waiting room (the gate) reaches its service
// and signers through Service, Tickets and Admissions.
package api

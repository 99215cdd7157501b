package session

import (
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// plan is one open resolved once, before anything is reserved or opened:
// the request with its defaults, its config and rank checked, the slot
// layout, the ring's geometry and the host memory it takes, and the key
// the consumers of its group must agree on. The budget, the ring and the
// session are made from it; nothing after it checks them again.
type plan struct {
	req       Request
	checked   stream.Checked
	transport *transport
	geometry  geometry
	// ringBytes is the ring budget the session takes (budget.go).
	ringBytes int64
	group     string
	// cont is what a process taking a consumer's place must ask for.
	cont continuity
}

// newPlan resolves req: each rule of an open is checked here, once, in
// the order a client learns of its mistakes (config, rank, the request's
// own fields, the ring, the state's size).
func newPlan(req Request, defaultSlots int) (plan, error) {
	checked, err := checkJob(req.Config, req.DPRank, req.DPSize)
	if err != nil {
		return plan{}, err
	}
	if err := req.resolve(defaultSlots); err != nil {
		return plan{}, err
	}
	p := plan{req: req, checked: checked, transport: req.Transport.of(), cont: req.continuity()}
	if p.group, err = req.groupKey(); err != nil {
		return plan{}, err
	}
	if err := p.sizeRing(); err != nil { // budget.go
		return plan{}, err
	}
	if err := p.checkStateSizeEarly(); err != nil { // budget.go
		return plan{}, err
	}
	return p, nil
}

// checkJob checks a config, and a rank of it: the rules of an open that
// the config and rank alone decide, which StateTemplate keeps too.
func checkJob(cfg stream.Config, dpRank, dpSize uint32) (stream.Checked, error) {
	checked, err := stream.Check(cfg)
	if err != nil {
		return stream.Checked{}, err
	}
	if err := cfg.ValidateRank(dpRank, dpSize); err != nil {
		return stream.Checked{}, err
	}
	return checked, nil
}

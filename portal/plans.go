package portal

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"minimax-m3/config"
)

// A plan is saved by one preview and taken by one up: each preview that asks for a plan gets a
// file of its own (NewPlanID, PlanFile), bound to the request it previewed, so a second preview of
// the same stack, by anyone, never changes what an up of the first applies. The engine confines
// the up to the plan's changes; the binding refuses an up whose request differs from the
// preview's before anything is touched.

// planTTL is how long an unused plan is kept: the cluster it was made against moves on.
const planTTL = 24 * time.Hour

var planID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// NewPlanID names a new plan.
func NewPlanID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// CheckPlanID refuses what NewPlanID cannot have made (a path, above all), at "plan".
func CheckPlanID(id string) error {
	if !planID.MatchString(id) {
		return &InvalidRequestError{Problems: config.Problems{{Key: "plan", Message: "not a plan a preview of this stack returned"}}}
	}
	return nil
}

// PlanFile is where the plan id of a stack is saved (id as NewPlanID made it).
func (m *Manager) PlanFile(stack, id string) string {
	return filepath.Join(m.o.StateDir, "plans", stack, id+".json")
}

// requestDigest is what binds a plan to the request previewed: the base, the stack and the whole
// typed config; not the token, which the plan never holds.
func requestDigest(r Request) (string, error) {
	b, err := json.Marshal(struct {
		Base, Stack string
		Config      config.Config
	}{r.Base, r.Name(), r.Config})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// bindPlan records, beside a plan a preview saved, the request it previewed, and drops the
// stack's plans older than planTTL.
func bindPlan(plan string, r Request) error {
	d, err := requestDigest(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(plan+".request", []byte(d), 0o600); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(plan), "*.json"))
	for _, f := range old {
		if info, err := os.Stat(f); err == nil && time.Since(info.ModTime()) > planTTL {
			_ = os.Remove(f)
			_ = os.Remove(f + ".request")
		}
	}
	return nil
}

// CheckPlan refuses, at "plan", an up of a plan that no preview saved, or that a preview of
// another request saved. Up checks it too; a service checks it before it accepts the request.
func (m *Manager) CheckPlan(plan string, r Request) error { return checkPlan(plan, r) }

func checkPlan(plan string, r Request) error {
	want, err := os.ReadFile(plan + ".request")
	if info, serr := os.Stat(plan); err == nil && (serr != nil || time.Since(info.ModTime()) > planTTL) {
		err = fs.ErrNotExist // used, or too old to apply to the cluster as it is now
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &InvalidRequestError{Problems: config.Problems{{Key: "plan", Message: "no such plan: it was used by an up, is older than " +
			planTTL.String() + ", or never saved; preview again"}}}
	}
	if err != nil {
		return err
	}
	got, err := requestDigest(r)
	if err != nil {
		return err
	}
	if got != string(want) {
		return &InvalidRequestError{Problems: config.Problems{{Key: "plan", Message: fmt.Sprintf(
			"saved by a preview of another request: this up's base, stack or config differ from what stack %s's preview checked; preview this request again", r.Name())}}}
	}
	return nil
}

// dropPlan removes a plan an up has applied: each plan is applied once.
func dropPlan(plan string) {
	_ = os.Remove(plan)
	_ = os.Remove(plan + ".request")
}

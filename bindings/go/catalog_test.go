package libroute

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func catalogRow(id uint64, dev uint32, n uint64) Row {
	return Row{Worker: Worker{ID: id}, Flags: RowHasCache | RowHasLoad, DeviceBlocks: dev, EffectiveBlocks: float64(dev),
		EffectiveTokens: uint64(dev) * 16, ActivePrefillTokens: 100 * n, ActiveDecodeBlocks: 10 * n, ActiveRequests: n}
}

func TestExplanationLayoutMatchesC(t *testing.T) {
	if bad := explanationLayoutMismatches(); len(bad) > 0 {
		t.Fatal(bad)
	}
}

func TestEveryBuiltinBuildsAndSelects(t *testing.T) {
	rows := []Row{catalogRow(1, 2, 10), catalogRow(2, 6, 12), catalogRow(3, 0, 40)}
	req := Request{PromptTokens: 160, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	for _, config := range []string{
		`{"type": "default", "temperature": 0.5, "seed": 1}`, `{"type": "round_robin"}`, `{"type": "random", "seed": 3}`,
		`{"type": "power_of_two", "k": 2}`, `{"type": "least_loaded", "metric": "prefill_tokens"}`,
		`{"type": "dynamo_two_tier"}`, `{"type": "sglang_cache_aware"}`, `{"type": "llm_d", "kv_capacity_blocks": 100}`,
		`{"type": "composed", "scorers": [{"type": "queue"}, {"type": "session_affinity"}], "picker": {"type": "min_cost"}}`,
	} {
		p, err := NewPolicy(config)
		if err != nil {
			t.Fatalf("%s: %v", config, err)
		}
		s, _ := NewSelector(16, 1)
		if sel, err := s.Select(p, &req, rows); err != nil || sel.Worker.ID < 1 || sel.Worker.ID > 3 {
			t.Errorf("%s: %+v %v", config, sel, err)
		}
		s.Close()
		p.Close()
	}
	if _, err := NewPolicy(`{"type": "fastest"}`); !errors.Is(err, StatusUnknownKey) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestSelectExplained(t *testing.T) {
	p, _ := NewPolicy(`{"type": "dynamo_two_tier", "filters": [{"type": "overload", "max_requests": 30}]}`)
	defer p.Close()
	s, _ := NewSelector(16, 1)
	defer s.Close()
	rows := []Row{catalogRow(1, 2, 10), catalogRow(2, 6, 12), catalogRow(3, 0, 20), catalogRow(4, 9, 40)}
	req := Request{PromptTokens: 160, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	ex := make([]Explanation, len(rows))
	sel, err := s.SelectExplained(p, &req, rows, ex)
	if err != nil || sel.Worker.ID != 2 {
		t.Fatalf("%+v %v", sel, err)
	}
	if ex[0].Total != 4 || ex[1].Total != 0 || ex[1].Chosen != 1 || ex[2].Total != 6 {
		t.Errorf("totals: %+v", ex[:3])
	}
	if ex[3].Disposition != DispositionFilterOverloaded || ex[3].Filter != 0 || !math.IsNaN(ex[3].Total) {
		t.Errorf("row 3: %+v", ex[3])
	}
	if _, err := s.SelectExplained(p, &req, rows, ex[:2]); !errors.Is(err, StatusBufferTooSmall) {
		t.Errorf("short buffer: %v", err)
	}
}

func TestPolicySetRoles(t *testing.T) {
	set, err := NewPolicySet(`{"instances": [{"name": "rr", "policy": {"type": "round_robin"}}], "roles": {"decode": "rr"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := set.InstanceName(RoleDecode); name != "rr" {
		t.Errorf("decode: %q", name)
	}
	if name, _ := set.InstanceName(RolePrefill); name != "default" {
		t.Errorf("prefill: %q", name)
	}
	s, _ := NewSelector(4, 1)
	defer s.Close()
	rows := []Row{catalogRow(1, 0, 0), catalogRow(2, 0, 0)}
	req := Request{PromptTokens: 160, BlockSize: 16, Role: RoleDecode}
	var picks []uint64
	for i := 0; i < 4; i++ {
		sel, err := s.Select(set.Policy(RoleDecode), &req, rows)
		if err != nil {
			t.Fatal(err)
		}
		picks = append(picks, sel.Worker.ID)
	}
	if picks[0] != 1 || picks[1] != 2 || picks[2] != 1 || picks[3] != 2 {
		t.Errorf("round robin: %v", picks)
	}
	set.Close()
	set.Close()
	if _, err := s.Select(set.Policy(RoleDecode), &req, rows); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	var e *Error
	if _, err := NewPolicySet(`{"roles": {"decode": "nope"}}`); !errors.As(err, &e) || e.Status != StatusInvalidKnob {
		t.Errorf("unknown instance: %v", err)
	}
}

func TestSessionAffinityThroughTheABI(t *testing.T) {
	p, _ := NewPolicy(`{"type": "composed", "scorers": [{"type": "session_affinity", "weight": 100}, {"type": "least_loaded"}]}`)
	defer p.Close()
	s, _ := NewSelector(16, 1)
	defer s.Close()
	rows := make([]Row, 8)
	for i := range rows {
		rows[i] = catalogRow(uint64(i+1), 0, uint64(i))
	}
	owners := map[uint64]bool{}
	for session := uint64(0); session < 20; session++ {
		req := Request{PromptTokens: 160, BlockSize: 16, Role: RoleAggregated, Session: &session}
		first, err := s.Select(p, &req, rows)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := s.Select(p, &req, rows)
		if first.Worker != again.Worker {
			t.Fatalf("session %d moved from %v to %v", session, first.Worker, again.Worker)
		}
		owners[first.Worker.ID] = true
	}
	// Without the session every request goes to the least loaded worker (1); with sessions
	// they spread over several owners.
	if len(owners) < 3 {
		t.Errorf("20 sessions landed on only %d workers", len(owners))
	}
	req := Request{PromptTokens: 160, BlockSize: 16, Role: RoleAggregated}
	if sel, _ := s.Select(p, &req, rows); sel.Worker.ID != 1 {
		t.Errorf("no session: worker %d", sel.Worker.ID)
	}
}

func TestLongInstanceName(t *testing.T) {
	name := strings.Repeat("n", 1000)
	set, err := NewPolicySet(`{"instances": [{"name": "` + name + `", "policy": {"type": "random"}}], "roles": {"encode": "` + name + `"}}`)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if got, err := set.InstanceName(RoleEncode); err != nil || got != name {
		t.Errorf("%d bytes, %v", len(got), err)
	}
}

package libroute

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestRowLayoutMatchesC(t *testing.T) {
	if bad := layoutMismatches(); len(bad) > 0 {
		t.Fatalf("Go and C layouts differ:\n%s", strings.Join(bad, "\n"))
	}
}

func TestVersionMatchesHeader(t *testing.T) {
	if Version() != HeaderVersion {
		t.Fatalf("library %s, header %s", Version(), HeaderVersion)
	}
}

// scenario is one line of the golden corpus (testdata/README.md).
type scenario struct {
	Name    string          `json:"name"`
	Policy  json.RawMessage `json:"policy"`
	Request struct {
		PromptTokens       uint64       `json:"prompt_tokens"`
		BlockSize          uint32       `json:"block_size"`
		Role               string       `json:"role"`
		TrackPrefillTokens bool         `json:"track_prefill_tokens"`
		ConditionalDisagg  bool         `json:"conditional_disagg"`
		HasTierMatches     bool         `json:"has_tier_matches"`
		SharedHits         *[][2]uint64 `json:"shared_hits"`
		PreferredTaints    [][2]float64 `json:"preferred_taints"`
		RequiredTaints     []uint       `json:"required_taints"`
		Pin                *[2]uint64   `json:"pin"`
	} `json:"request"`
	Candidates []struct {
		Worker     uint64 `json:"worker"`
		Rank       uint32 `json:"rank"`
		Taints     []uint `json:"taints"`
		Overloaded bool   `json:"overloaded"`
		Cache      *struct {
			Device          uint32          `json:"device"`
			Host            uint32          `json:"host"`
			Disk            uint32          `json:"disk"`
			EffectiveBlocks json.RawMessage `json:"effective_blocks"`
			EffectiveTokens uint64          `json:"effective_tokens"`
		} `json:"cache"`
		Load *struct {
			ActivePrefillTokens uint64 `json:"active_prefill_tokens"`
			ActiveDecodeBlocks  uint64 `json:"active_decode_blocks"`
			ActiveRequests      uint64 `json:"active_requests"`
		} `json:"load"`
	} `json:"candidates"`
	Expect struct {
		CostBits []*string   `json:"cost_bits"`
		Argmin   [][2]uint64 `json:"argmin"`
		Picks    *struct {
			Seed        uint64      `json:"seed"`
			Temperature float64     `json:"temperature"`
			Sequence    [][2]uint64 `json:"sequence"`
		} `json:"picks"`
		Error *string `json:"error"`
	} `json:"expect"`
}

var errorNames = map[Status]string{
	StatusNoEndpoints: "no_endpoints", StatusAllFiltered: "all_filtered", StatusAllOverloaded: "all_overloaded",
	StatusCapacityExceeded: "capacity_exceeded", StatusInvalidRequest: "invalid_request", StatusInvalidRow: "invalid_row",
	StatusDuplicateWorker: "duplicate_worker", StatusPinNotAllowed: "pin_not_allowed", StatusPinOverloaded: "pin_overloaded",
	StatusPinIneligible: "pin_ineligible", StatusNonFiniteCost: "non_finite_cost", StatusNonFiniteTotal: "non_finite_total",
	StatusInvalidJSON: "invalid_config", StatusUnknownKey: "invalid_config", StatusInvalidKnob: "invalid_config",
}

func errorName(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		if name, ok := errorNames[e.Status]; ok {
			return name
		}
	}
	return err.Error()
}

func parseFloat(raw json.RawMessage) float64 {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "NaN":
			return math.NaN()
		case "inf":
			return math.Inf(1)
		case "-inf":
			return math.Inf(-1)
		}
	}
	f, _ := strconv.ParseFloat(string(raw), 64)
	return f
}

func mask(taints []uint) uint64 {
	var m uint64
	for _, t := range taints {
		m |= 1 << t
	}
	return m
}

func (s *scenario) build() (Request, []Row) {
	r := s.Request
	req := Request{
		PromptTokens: r.PromptTokens, BlockSize: r.BlockSize, TrackPrefillTokens: r.TrackPrefillTokens,
		ConditionalDisagg: r.ConditionalDisagg, HasTierMatches: r.HasTierMatches, RequiredTaints: mask(r.RequiredTaints),
	}
	req.Role = map[string]Role{"prefill": RolePrefill, "decode": RoleDecode, "aggregated": RoleAggregated, "encode": RoleEncode}[r.Role]
	for _, p := range r.PreferredTaints {
		req.PreferredTaints = append(req.PreferredTaints, PreferredTaint{Taint: uint32(p[0]), Weight: p[1]})
	}
	if r.SharedHits != nil {
		req.SharedHits = []BlockRange{}
		for _, h := range *r.SharedHits {
			req.SharedHits = append(req.SharedHits, BlockRange{Start: h[0], End: h[1]})
		}
	}
	if r.Pin != nil {
		req.Pin = &Worker{ID: r.Pin[0], DPRank: uint32(r.Pin[1])}
	}
	rows := make([]Row, len(s.Candidates))
	for i, c := range s.Candidates {
		rows[i] = Row{Worker: Worker{ID: c.Worker, DPRank: c.Rank}, Taints: mask(c.Taints)}
		if c.Overloaded {
			rows[i].Flags |= RowOverloaded
		}
		if c.Cache != nil {
			rows[i].Flags |= RowHasCache
			rows[i].DeviceBlocks, rows[i].HostBlocks, rows[i].DiskBlocks = c.Cache.Device, c.Cache.Host, c.Cache.Disk
			rows[i].EffectiveBlocks = parseFloat(c.Cache.EffectiveBlocks)
			rows[i].EffectiveTokens = c.Cache.EffectiveTokens
		}
		if c.Load != nil {
			rows[i].Flags |= RowHasLoad
			rows[i].ActivePrefillTokens, rows[i].ActiveDecodeBlocks, rows[i].ActiveRequests =
				c.Load.ActivePrefillTokens, c.Load.ActiveDecodeBlocks, c.Load.ActiveRequests
		}
	}
	return req, rows
}

// withSeed is the scenario's policy with the picks' seed and temperature.
func withSeed(policy json.RawMessage, seed uint64, temperature float64) string {
	knobs := map[string]json.RawMessage{}
	_ = json.Unmarshal(policy, &knobs)
	knobs["seed"] = json.RawMessage(strconv.FormatUint(seed, 10))
	knobs["temperature"] = json.RawMessage(strconv.FormatFloat(temperature, 'g', -1, 64))
	out, _ := json.Marshal(knobs)
	return string(out)
}

func runScenario(t *testing.T, s *scenario) {
	want := ""
	if s.Expect.Error != nil {
		want = *s.Expect.Error
	}
	policy, err := NewPolicy(string(s.Policy))
	if err != nil {
		if want != "invalid_config" {
			t.Errorf("%s: error: expected %q, actual %v", s.Name, want, err)
		}
		return
	}
	defer policy.Close()
	selector, err := NewSelector(4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer selector.Close()
	req, rows := s.build()
	_, err = selector.Select(policy, &req, rows)
	if got := errorName(err); got != want {
		t.Errorf("%s: error: expected %q, actual %q", s.Name, want, got)
	}
	if err != nil {
		return
	}
	candidates, err := selector.LastCosts()
	if err != nil {
		t.Fatal(err)
	}
	cost := map[int]float64{}
	for _, c := range candidates {
		cost[c.Row] = c.Cost
	}
	for i, bits := range s.Expect.CostBits {
		c, present := cost[i]
		if (bits == nil) == present {
			t.Errorf("%s: costs[%d]: expected present=%v, actual present=%v", s.Name, i, bits != nil, present)
			continue
		}
		if bits != nil {
			if got := fmt.Sprintf("%016x", math.Float64bits(c)); got != *bits {
				t.Errorf("%s: cost_bits[%d]: expected %s, actual %s", s.Name, i, *bits, got)
			}
		}
	}
	if s.Expect.Argmin != nil {
		low := math.Inf(1)
		for _, c := range cost {
			low = math.Min(low, c)
		}
		var got [][2]uint64
		for i, c := range cost {
			if c == low {
				got = append(got, [2]uint64{rows[i].Worker.ID, uint64(rows[i].Worker.DPRank)})
			}
		}
		sort.Slice(got, func(a, b int) bool { return got[a][0] < got[b][0] || (got[a][0] == got[b][0] && got[a][1] < got[b][1]) })
		if fmt.Sprint(got) != fmt.Sprint(s.Expect.Argmin) {
			t.Errorf("%s: argmin: expected %v, actual %v", s.Name, s.Expect.Argmin, got)
		}
	}
	if p := s.Expect.Picks; p != nil {
		seeded, err := NewPolicy(withSeed(s.Policy, p.Seed, p.Temperature))
		if err != nil {
			t.Fatal(err)
		}
		defer seeded.Close()
		fresh, _ := NewSelector(4096, 1)
		defer fresh.Close()
		for k, w := range p.Sequence {
			sel, err := fresh.Select(seeded, &req, rows)
			if err != nil || sel.Worker.ID != w[0] || uint64(sel.Worker.DPRank) != w[1] {
				t.Errorf("%s: picks.sequence[%d]: expected %v, actual %v (%v)", s.Name, k, w, sel.Worker, err)
				break
			}
		}
	}
}

func TestGoldenCorpus(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/scenarios/*.jsonl")
	if len(files) < 4 {
		t.Fatalf("corpus not found: %v", files)
	}
	n := 0
	for _, f := range files {
		in, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(in)
		lines.Buffer(make([]byte, 1<<20), 1<<24)
		for lines.Scan() {
			var s scenario
			if err := json.Unmarshal(lines.Bytes(), &s); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			runScenario(t, &s)
			n++
		}
		in.Close()
	}
	if n < 60 {
		t.Fatalf("only %d scenarios", n)
	}
	t.Logf("%d scenarios agree with the corpus", n)
}

func TestBadInputIsAnError(t *testing.T) {
	_, err := NewPolicy(`{"temprature": 1}`)
	if !errors.Is(err, StatusUnknownKey) || !strings.Contains(err.Error(), "temprature") {
		t.Errorf("unknown key: %v", err)
	}
	_, err = NewPolicy(`{"host_cache_hit_weight": 3}`)
	if !errors.Is(err, StatusInvalidKnob) || !strings.Contains(err.Error(), "host_cache_hit_weight") {
		t.Errorf("invalid knob: %v", err)
	}
	if _, err = NewPolicy(`{`); !errors.Is(err, StatusInvalidJSON) {
		t.Errorf("invalid JSON: %v", err)
	}
	policy, _ := NewPolicy("")
	defer policy.Close()
	small, _ := NewSelector(2, 0)
	defer small.Close()
	req := Request{PromptTokens: 64, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	if _, err := small.Select(policy, &req, nil); !errors.Is(err, StatusNoEndpoints) {
		t.Errorf("empty rows: %v", err)
	} else if got, want := err.Error(), "libroute: no endpoints: no eligible worker among the rows"; got != want {
		// One sentence, not the status's text and then the detail repeating it.
		t.Errorf("empty rows: %q, want %q", got, want)
	}
	rows := []Row{{Worker: Worker{ID: 1}}, {Worker: Worker{ID: 2}}, {Worker: Worker{ID: 3}}}
	if _, err := small.Select(policy, &req, rows); !errors.Is(err, StatusCapacityExceeded) {
		t.Errorf("too many rows: %v", err)
	}
	nan := []Row{{Worker: Worker{ID: 1}, Flags: RowHasCache, EffectiveBlocks: math.NaN()}}
	if _, err := small.Select(policy, &req, nan); !errors.Is(err, StatusInvalidRow) || !strings.Contains(err.Error(), "row 0") {
		t.Errorf("NaN field: %v", err)
	}
	bad := req
	bad.Role = 9
	if _, err := small.Select(policy, &bad, rows[:1]); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("bad role: %v", err)
	}
	if _, err := NewSelector(5000, 0); !errors.Is(err, StatusCapacityExceeded) {
		t.Errorf("capacity: %v", err)
	}
}

func TestUseAfterCloseIsAnErrorAndCloseIsIdempotent(t *testing.T) {
	policy, _ := NewPolicy("")
	selector, _ := NewSelector(4, 0)
	policy.Close()
	policy.Close()
	req := Request{PromptTokens: 16, BlockSize: 16, Role: RoleAggregated}
	if _, err := selector.Select(policy, &req, []Row{{Worker: Worker{ID: 1}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed policy: %v", err)
	}
	selector.Close()
	selector.Close()
	if _, err := selector.LastCosts(); !errors.Is(err, ErrClosed) {
		t.Errorf("closed selector: %v", err)
	}
	if _, err := policy.Inputs(RoleDecode, false); !errors.Is(err, ErrClosed) {
		t.Errorf("closed policy inputs: %v", err)
	}
}

func TestOnePolicyManyGoroutines(t *testing.T) {
	policy, _ := NewPolicy(`{"temperature": 0.7, "seed": 42}`)
	defer policy.Close()
	rows := benchFleet(64)
	req := Request{PromptTokens: 2048, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	run := func() []Worker {
		s, _ := NewSelector(64, 0)
		defer s.Close()
		var out []Worker
		for i := 0; i < 200; i++ {
			sel, err := s.Select(policy, &req, rows)
			if err != nil {
				t.Error(err)
				return nil
			}
			out = append(out, sel.Worker)
		}
		return out
	}
	want := run()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := run(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Error("a goroutine's seeded sequence differs")
			}
		}()
	}
	wg.Wait()
}

// benchFleet is the Rust benchmarks' fleet (benches/src/lib.rs), for comparable numbers.
func benchFleet(n uint64) []Row {
	rows := make([]Row, n)
	for id := uint64(0); id < n; id++ {
		half := (id * 37) % 97
		rows[id] = Row{
			Worker: Worker{ID: id}, Flags: RowHasCache | RowHasLoad,
			EffectiveBlocks: float64(half) * 0.5, EffectiveTokens: half * 8,
			ActivePrefillTokens: (id * 131) % 4096, ActiveDecodeBlocks: (id * 17) % 509, ActiveRequests: id % 13,
		}
	}
	return rows
}

func BenchmarkSelect64(b *testing.B) {
	policy, _ := NewPolicy("")
	defer policy.Close()
	selector, _ := NewSelector(4096, 0)
	defer selector.Close()
	rows := benchFleet(64)
	req := Request{PromptTokens: 2048, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := selector.Select(policy, &req, rows); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzSelect(f *testing.F) {
	f.Add(uint64(64), uint32(16), uint32(2), uint64(3), 1.5, uint32(3), true)
	f.Add(uint64(0), uint32(0), uint32(7), uint64(0), math.NaN(), uint32(255), false)
	policy, _ := NewPolicy(`{"temperature": 0.5}`)
	selector, _ := NewSelector(16, 0)
	f.Fuzz(func(t *testing.T, prompt uint64, bs uint32, role uint32, n uint64, eb float64, flags uint32, track bool) {
		rows := make([]Row, n%20)
		for i := range rows {
			rows[i] = Row{Worker: Worker{ID: uint64(i) % 7}, Flags: flags, EffectiveBlocks: eb * float64(i), ActiveDecodeBlocks: uint64(i)}
		}
		req := Request{PromptTokens: prompt, BlockSize: bs, Role: Role(role), TrackPrefillTokens: track}
		sel, err := selector.Select(policy, &req, rows)
		if err == nil && (sel.Row >= len(rows) || math.IsNaN(sel.Cost) || math.IsInf(sel.Cost, 0)) {
			t.Fatalf("invalid selection %+v for %d rows", sel, len(rows))
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("an error that is not a *libroute.Error: %v", err)
		}
	})
}

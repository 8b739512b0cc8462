package integration

import (
	"flag"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The suite's tests run side by side in `go test -parallel` slots, longest first.
//
// Go's own scheduler releases every parallel test at once and hands its slots to whichever test
// goroutine runs first, so a long test could start last and run alone at the end while the other
// slots stand empty. Here Go's limit is lifted (takeParallelFlag) and parallel(t) hands out the
// same number of slots itself, to the waiting test that is longest in longestFirst, once every
// test has asked: the longest processing time first, which keeps the end of the run short.
//
// A test on the shared rack box says so (parallelOnBox): the one test that stops the box's
// operator (parallelAloneOnBox) runs first, beside tests that do not use the box, and the box's
// tests start after it; rackBox refuses a test that holds a plain slot (parallel(t)).
//
// What this changes in `go test -v`'s output: a test's duration counts from its start, so it
// includes its wait for a slot, which the test logs.

// longestFirst are the suite's tests, longest first, as they ran on 2 cores
// (docs/measurements.md); the few of a few seconds that are not named start after them, in the
// order they ask.
var longestFirst = []string{
	// Not the longest, but the box's tests wait for it (parallelAloneOnBox): first, beside the
	// tests of the plain API server.
	"TestBoxAStoppedOperatorHoldsDestroyAtItsFinalizer",
	"TestBoxFullRackRecipeRolloutWaitsForAGPU",
	"TestBoxBenchmarkSweepResumesComparesAndFailsOverBudget",
	"TestBoxBenchCommand",
	"TestBoxUpNamesWhatKeepsPodsFromRunning",
	"TestBoxStackLifecycleDisagg",
	"TestBoxOneAggStackThroughDayTwoChanges",
	"TestBoxBenchmarkSweepRestartsThroughTheOperator",
	"TestBoxStackLifecycleAgg",
	"TestBoxTeamNamespaceRefusesBypassPodsAndAdmitsTheStacks",
	"TestBoxThePortalActsAsTheTeamAtTheAPIServer",
	"TestBoxTeamNamespaceAdmitsDisaggWithEveryOption",
	"TestBoxOnAClusterWithGroveTheGraphStaysOnTheComponentPath",
	"TestBoxPackageFromYAML",
	"TestBoxFailuresCarryKubernetesReasonsTooFewGPUs",
	"TestPRCheckCatchesAWorkerRoll",
	"TestBoxAGraphLandsWholeInTheOneCliqueWithRoomAgg",
	"TestEveryTypedFieldSetThroughTheCLIReadsBackTheSame",
	"TestPRCheckRefusesToReplaceTheCache",
	"TestBoxTwoStacksShareANamespaceAndOneCache",
	"TestBoxFullRackFlagChangeRollsWithoutASpareGPU",
	"TestPortalRecoversWhatAKilledPortalLeft",
	"TestUpWaitsForTheOperatorToObserveTheNewGeneration",
	"TestBoxRenamingTheGraphOnAFullRack",
	"TestBoxAdoptingAKubectlAppliedRecipeThenChangingIt",
	"TestPortalLifecycle",
	"TestPortalUpNeedsConsentToRollWorkers",
	"TestPRCheckRefactorChangesNothing",
	"TestBoxOperatorFailureReasonInUpsError",
	"TestBoxSmokeTestRunsAfterTheGraphIsReadyAndReportsItsResult",
	"TestPolicyPackInThePulumiCLI",
	"TestBoxAWorkerWaitsForItsTraysIMEXDaemon",
	"TestPlainCLIPreviewOfBothStacks",
	"TestPortalServiceLimits",
	"TestBoxAdoptedNamespaceAndSecretAreLeftAlone",
	"TestPortalConcurrency",
	"TestBoxPortalPageShowsAnUpLive",
	"TestBoxSwitchingToAnotherContextOfTheSameClusterReplacesNothing",
	"TestBoxAGraphLandsWholeInTheOneCliqueWithRoomDisagg",
	"TestBoxADownloadNotWaitedForIsReplacedWhileItRuns",
	"TestBoxDerivedValuesFollowTheirSourceInTheLiveGraph",
	"TestBoxUpStopsOnAFailureThatDoesNotClear",
	"TestPortalCancel",
	"TestPortalService",
	"TestPulumiNewFromTheTemplateMakesAStackThatPreviews",
	"TestPortalSwitchToAnExistingSecretClearsTheStoredToken",
	"TestPRCheckOnAClusterTouchesOnlyWhatItCreates",
	"TestPortalPageBehindAProxyAtABasePath",
	"TestRenderedManifestsPassAServerSideDryRun",
}

// slots are the suite's parallel slots and the tests waiting for one.
var slots struct {
	mu      sync.Mutex
	free    int
	asked   int // tests that called parallel(t): every one of them will arrive
	arrived int // tests that arrived to wait for a slot (or already hold one)
	waiting []*slotWaiter
	// The tests on the shared rack box: how many run, and whether the one that stops its
	// operator waits or runs (no other test on the box may run beside it).
	onBox                    int
	aloneWaiting, aloneOnBox bool
	kinds                    map[string]slotKind
}

// slotKind is what a test shares with the others.
type slotKind int

const (
	plainSlot     slotKind = iota // the plain API server, or a cluster of its own
	boxSlot                       // the shared rack box
	aloneOnTheBox                 // the shared rack box, with no other test on it (it stops the box's operator)
)

type slotWaiter struct {
	rank, seq int
	kind      slotKind
	ready     chan struct{}
}

// takeParallelFlag makes the suite's own slots as many as `go test -parallel` says (GOMAXPROCS
// unless set) and lifts Go's limit, so that parallel(t) decides which test runs next. Call it
// after flag.Parse.
func takeParallelFlag() error {
	f := flag.Lookup("test.parallel")
	if f == nil {
		slots.free = 1
		return nil
	}
	n, err := strconv.Atoi(f.Value.String())
	if err != nil || n < 1 {
		n = 1
	}
	slots.free = n
	return flag.Set("test.parallel", strconv.Itoa(1<<16))
}

// parallel is t.Parallel with the suite's slots, for a test that does not use the shared rack
// box: the test runs once it holds one, and gives it back when it and its cleanups are done.
func parallel(t *testing.T) { t.Helper(); runInSlot(t, plainSlot) }

// parallelOnBox is parallel for a test on the shared rack box (rackBox).
func parallelOnBox(t *testing.T) { t.Helper(); runInSlot(t, boxSlot) }

// parallelAloneOnBox is parallel for a test that needs the shared rack box to itself: it runs
// beside tests that do not use the box, and no test on the box starts until it is done.
func parallelAloneOnBox(t *testing.T) { t.Helper(); runInSlot(t, aloneOnTheBox) }

func runInSlot(t *testing.T, kind slotKind) {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		// A subtest's t.Parallel returns only once its parent's function has returned, and no slot
		// is handed out until every test that asked has arrived: the run would stop there.
		t.Fatal("parallel(t) and its kin are for top-level tests: a subtest runs in its parent's slot")
	}
	slots.mu.Lock()
	slots.asked++
	if slots.kinds == nil {
		slots.kinds = map[string]slotKind{}
	}
	slots.kinds[t.Name()] = kind
	slots.mu.Unlock()
	t.Parallel()
	start := time.Now()
	<-arrive(t.Name(), kind).ready
	if waited := time.Since(start); waited > time.Second {
		t.Logf("started after %s waiting for a slot", waited.Round(time.Second))
	}
	t.Cleanup(func() { releaseSlot(kind) })
}

// slotOnBox reports whether the top-level test of t holds a slot on the shared rack box (or runs
// outside the suite's slots: not parallel).
func slotOnBox(t *testing.T) bool {
	name, _, _ := strings.Cut(t.Name(), "/")
	slots.mu.Lock()
	defer slots.mu.Unlock()
	kind, ok := slots.kinds[name]
	return !ok || kind != plainSlot
}

// arrive queues a test for a slot and hands out the free ones once every test has asked.
func arrive(name string, kind slotKind) *slotWaiter {
	slots.mu.Lock()
	defer slots.mu.Unlock()
	// -count=N names the runs after the first TestX#01, TestX#02, ...
	base, _, _ := strings.Cut(name, "#")
	rank := slices.Index(longestFirst, base)
	if rank < 0 {
		rank = len(longestFirst)
	}
	w := &slotWaiter{rank: rank, seq: slots.arrived, kind: kind, ready: make(chan struct{})}
	slots.arrived++
	if kind == aloneOnTheBox {
		slots.aloneWaiting = true
	}
	i, _ := slices.BinarySearchFunc(slots.waiting, w, func(a, b *slotWaiter) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.seq - b.seq
	})
	slots.waiting = slices.Insert(slots.waiting, i, w)
	dispatch()
	return w
}

// releaseSlot gives a slot back to the next waiting test.
func releaseSlot(kind slotKind) {
	slots.mu.Lock()
	defer slots.mu.Unlock()
	slots.free++
	switch kind {
	case boxSlot:
		slots.onBox--
	case aloneOnTheBox:
		slots.aloneOnBox = false
	}
	dispatch()
}

// dispatch hands free slots to the first waiters that may run now, once every test that asked
// is waiting or running (before that, a test that asked later may be longer). A test alone on
// the box waits for the box's tests to end; while it waits or runs, no test on the box starts.
// Call it with slots.mu held.
func dispatch() {
	if slots.arrived < slots.asked {
		return
	}
	for i := 0; slots.free > 0 && i < len(slots.waiting); {
		w := slots.waiting[i]
		switch {
		case w.kind == aloneOnTheBox && slots.onBox == 0:
			slots.aloneWaiting, slots.aloneOnBox = false, true
		case w.kind == boxSlot && !slots.aloneWaiting && !slots.aloneOnBox:
			slots.onBox++
		case w.kind == plainSlot:
		default:
			i++
			continue
		}
		slots.free--
		close(w.ready)
		slots.waiting = slices.Delete(slots.waiting, i, i+1)
	}
}

package integration

import (
	"flag"
	"slices"
	"strconv"
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
// What this changes in `go test -v`'s output: a test's duration counts from its start, so it
// includes its wait for a slot, which the test logs.

// longestFirst are the suite's longest tests, longest first, as they ran on 2 cores
// (docs/measurements.md); tests not named here start after them, in the order they ask.
var longestFirst = []string{
	"TestBoxFullRackRecipeRolloutWaitsForAGPU",
	"TestBoxBenchmarkSweepResumesComparesAndFailsOverBudget",
	"TestBoxBenchCommand",
	"TestBoxUpNamesWhatKeepsPodsFromRunning",
	"TestBoxStackLifecycleDisagg",
	"TestBoxOneAggStackThroughDayTwoChanges",
	"TestBoxBenchmarkSweepRestartsThroughTheOperator",
	"TestBoxStackLifecycleAgg",
	"TestBoxOnAClusterWithGroveTheGraphStaysOnTheComponentPath",
	"TestBoxPackageFromYAML",
	"TestBoxFailuresCarryKubernetesReasonsTooFewGPUs",
	"TestPRCheckCatchesAWorkerRoll",
	"TestBoxAStoppedOperatorHoldsDestroyAtItsFinalizer",
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
}

// slots are the suite's parallel slots and the tests waiting for one.
var slots struct {
	mu      sync.Mutex
	free    int
	asked   int // tests that called parallel(t): every one of them will arrive
	arrived int // tests that arrived to wait for a slot (or already hold one)
	waiting []*slotWaiter
}

type slotWaiter struct {
	rank, seq int
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

// parallel is t.Parallel with the suite's slots: the test runs once it holds one, and gives it
// back when it and its cleanups are done.
func parallel(t *testing.T) {
	t.Helper()
	slots.mu.Lock()
	slots.asked++
	slots.mu.Unlock()
	t.Parallel()
	start := time.Now()
	<-arrive(t.Name()).ready
	if waited := time.Since(start); waited > time.Second {
		t.Logf("started after %s waiting for a slot", waited.Round(time.Second))
	}
	t.Cleanup(releaseSlot)
}

// arrive queues a test for a slot and hands out the free ones once every test has asked.
func arrive(name string) *slotWaiter {
	slots.mu.Lock()
	defer slots.mu.Unlock()
	rank := slices.Index(longestFirst, name)
	if rank < 0 {
		rank = len(longestFirst)
	}
	w := &slotWaiter{rank: rank, seq: slots.arrived, ready: make(chan struct{})}
	slots.arrived++
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
func releaseSlot() {
	slots.mu.Lock()
	defer slots.mu.Unlock()
	slots.free++
	dispatch()
}

// dispatch hands free slots to the first waiters, once every test that asked is waiting or
// running (before that, a test that asked later may be longer). Call it with slots.mu held.
func dispatch() {
	if slots.arrived < slots.asked {
		return
	}
	for slots.free > 0 && len(slots.waiting) > 0 {
		slots.free--
		close(slots.waiting[0].ready)
		slots.waiting = slots.waiting[1:]
	}
}

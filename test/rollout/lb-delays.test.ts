// Issue 19, item 3, the short version of bench/lb-delays.js: two pods behind two
// simulated load balancers (testkit/lb-delays.ts), one of which stops routing to
// the terminating pod 0.5 s after the signal and the other 3 s after it;
// keep-alive clients, and a kubelet-like health checker that opens a new
// connection to pod 1's /readyz every second from the first load balancer's
// address (probes must be told apart by request, not by peer).
//
// With --adaptive-reject on (used when the CLI's --help mentions it): no request
// refused or reset, and the reject phase ends after the late load balancer's
// delay but before the 6 s period. Before that flag exists: no request refused or
// reset, and the reject phase lasts the period.
import test from 'ava';
import {describeTermination, fixedDelays, gracefulClusterPod, runLbDelays, summarize, supportsAdaptiveReject} from '../../testkit/lb-delays.js';
import {Cleanup} from '../../testkit/rollout.js';
import {CLI, fixture, ROOT} from '../helpers/cluster.js';

// Room above the late load balancer (3 s) plus the quiet second and the reports' lag, on a loaded CI machine.
const REJECT_PERIOD_MS = 8000;
const EARLY_MS = 500;
const LATE_MS = 3000;
const adaptive = supportsAdaptiveReject(CLI);

test(`two load balancers, ${EARLY_MS} ms and ${LATE_MS} ms late, ${adaptive ? '--adaptive-reject on' : 'fixed reject period'}: nothing refused or reset, the reject phase ${adaptive ? 'ends after the late one' : 'lasts the period'}`, async t => {
	t.timeout(90_000);
	const cleanup = new Cleanup();
	t.teardown(async () => cleanup.run());
	const run = await runLbDelays({
		pod: gracefulClusterPod({cli: CLI, app: fixture('app.mjs'), cwd: ROOT, rejectPeriodMs: REJECT_PERIOD_MS, adaptive}),
		distribution: fixedDelays('one late', [EARLY_MS, LATE_MS]),
		lbs: 2,
		rejectPeriodMs: REJECT_PERIOD_MS,
		// The adaptive phase is shorter: one more termination in about the same time.
		terminations: adaptive ? 3 : 2,
		// Long enough that the adaptive rule has looked 10 s by the end (primary/arrivals.ts YOUNG_LOOK_MS).
		warmupMs: 4000,
		log: message => t.log(message),
		onTermination: termination => t.log(describeTermination(termination)),
	}, cleanup);
	const summary = summarize(run);
	t.log(JSON.stringify(summary));
	const lateLb = run.lbAddresses[1]!;

	for (const x of run.terminations) {
		const which = `termination ${x.index + 1}: ${describeTermination(x)}`;
		t.is(x.late, 0, `no request to pod 1 refused or reset: ${which}`);
		t.false(x.exit.killed, `pod 1 exited on its own: ${which}`);
		t.is(x.exit.code, 0, `pod 1 drained cleanly: ${which}`);
		t.true(x.toPod1.rejected > 0, `the load balancers' requests to pod 1 were answered 503 meanwhile: ${which}`);
		// The harness's ground truth: the late load balancer sent pod 1 requests until about its delay.
		t.is(x.truthLastArrivalFrom, lateLb, `the last request pod 1 answered came from the late load balancer: ${which}`);
		t.true(x.truthLastArrivalMs! > LATE_MS - 500 && x.truthLastArrivalMs! <= x.removedMs[1]!, `the late load balancer routed to pod 1 until about ${LATE_MS} ms, and not after it stopped (${x.removedMs[1]} ms): ${which}`);
		// The health checker's new connections hold nothing open: pod 1 leaves right after it stops listening.
		t.true(x.rejectObservedMs !== undefined && x.exit.afterMs - x.rejectObservedMs < 2000, `pod 1 exited soon after the reject phase ended: ${which}`);
		if (x.lastArrivalMs !== undefined) {
			t.true(Math.abs(x.lastArrivalMs - x.truthLastArrivalMs!) <= 250, `the pod's lastArrivalMs (${x.lastArrivalMs}) within 250 ms of the truth (${x.truthLastArrivalMs}): ${which}`);
			t.true(x.lastArrivalFrom?.endsWith(lateLb), `the pod's lastArrivalFrom (${x.lastArrivalFrom}) is the late load balancer (${lateLb}): ${which}`);
		}

		if (adaptive) {
			t.is(x.rejectEnd, 'adaptive', `the reject phase ended early: ${which}`);
			t.true(x.rejectMs > Math.max(LATE_MS, x.truthLastArrivalMs!) && x.rejectMs < REJECT_PERIOD_MS, `the reject phase ended after the late load balancer's ${LATE_MS} ms and before the ${REJECT_PERIOD_MS} ms period (${x.rejectMs} ms): ${which}`);
		} else {
			t.true(Math.abs(x.rejectMs - REJECT_PERIOD_MS) <= 100, `the reject phase lasted the period: ${which}`);
			t.true(x.rejectObservedMs! >= REJECT_PERIOD_MS - 100 && x.rejectObservedMs! <= REJECT_PERIOD_MS + 1000, `the pod stopped listening at the end of the period (${x.rejectObservedMs} ms): ${which}`);
		}
	}

	t.deepEqual(run.clients.failures, {}, 'the clients of the load balancers saw no failure');
	t.true(run.clients.requests > 1000, `the load ran (${run.clients.requests} requests)`);
});

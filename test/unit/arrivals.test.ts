// Arrival telemetry and the adaptive reject period's rule: the worker's counts
// (src/worker/arrivals.ts), their sum over the workers and the rule itself
// (src/primary/arrivals.ts).
import test from 'ava';
import {decide, mergeArrivals, quietWindowMs, type ArrivalFigures} from '../../src/primary/arrivals.js';
import {Arrivals, MAX_PEERS, PEER_COUNTER, peerName, type Counted} from '../../src/worker/arrivals.js';
import {FakeClock} from '../helpers/fakes.js';

/** A worker's arrivals that could count for a minute before its first request (`young`: not that long). */
function worker({young = false} = {}) {
	const clock = new FakeClock();
	const arrivals = new Arrivals(clock);
	if (!young) {
		clock.advance(60_000);
	}

	/** A request while serving on `socket`, as the filters count it. */
	const serve = (socket: Counted, address: string, userAgent?: string): void => {
		(socket[PEER_COUNTER] ?? arrivals.counterFor(socket, {remoteAddress: address}, userAgent)).n++;
	};

	return {clock, arrivals, serve};
}

test('while serving: one counter per peer, found on a connection\'s first request; the rate before the signal is per second over the last 60 s', t => {
	const {clock, arrivals, serve} = worker();
	const lb1 = {};
	const lb2 = {};
	const probe = {};
	for (let second = 0; second < 120; second++) {
		// LB 1: 10 requests a second on one kept-alive connection; LB 2 from the 60th second on, 2 a second.
		for (let i = 0; i < 10; i++) {
			serve(lb1, '::ffff:10.0.0.1');
		}

		if (second >= 60) {
			serve(lb2, '10.0.0.2');
			serve(lb2, '10.0.0.2');
		}

		serve(probe, '10.0.0.3', 'kube-probe/1.30');
		clock.advance(1000);
	}

	arrivals.begin();
	const report = arrivals.report()!;
	const rates = Object.fromEntries(report.peers.map(peer => [peer.peer, peer.ratePerSecond]));
	t.is(Math.round(rates['10.0.0.1']!), 10, 'IPv4 without its IPv6 mapping');
	t.is(Math.round(rates['10.0.0.2']!), 2);
	t.is(rates['10.0.0.3'], undefined, 'a health checker\'s connection is not a peer');
	t.deepEqual({total: report.total, lastMs: report.lastMs, lastFrom: report.lastFrom, bySecond: report.bySecond}, {total: 0, lastMs: null, lastFrom: null, bySecond: []});
});

test('after the signal: each app request by second and by peer; health checkers by User-Agent are not app requests', t => {
	const {clock, arrivals} = worker();
	arrivals.arrived('10.0.0.1', undefined);
	t.is(arrivals.report(), undefined, 'nothing counted before the signal');
	arrivals.begin();
	const before = arrivals.changes;
	arrivals.arrived('10.0.0.1', 'curl/8');
	clock.advance(1500);
	arrivals.arrived('10.0.0.2', undefined);
	arrivals.arrived('10.0.0.9', 'ELB-HealthChecker/2.0');
	clock.advance(1000);
	arrivals.arrived('::ffff:10.0.0.1', undefined);
	t.true(arrivals.changes > before);
	t.like(arrivals.report(), {total: 3, bySecond: [1, 1, 1], lastMs: 2500, lastFrom: '10.0.0.1'});
	t.deepEqual(arrivals.report()!.peers.map(peer => [peer.peer, peer.count, peer.lastMs]), [['10.0.0.1', 2, 2500], ['10.0.0.2', 1, 1500]]);
});

test('past MAX_PEERS, the peers share one counter named other', t => {
	const {arrivals, serve} = worker();
	for (let i = 0; i < MAX_PEERS + 10; i++) {
		serve({}, `10.1.${Math.floor(i / 250)}.${i % 250}`);
	}

	arrivals.begin();
	const peers = arrivals.report()!.peers;
	t.is(peers.length, MAX_PEERS + 1);
	t.truthy(peers.find(peer => peer.peer === 'other'));
	t.is(peerName(undefined), 'local');
});

const figures = (overrides: Partial<ArrivalFigures>): ArrivalFigures => ({total: 0, bySecond: [], lastMs: null, lastFrom: null, peers: [], ...overrides});

test('merge: seconds summed, the latest arrival wins, a peer\'s rate summed over the workers it reached', t => {
	const merged = mergeArrivals([
		{total: 3, bySecond: [2, 1], lastMs: 1200, lastFrom: 'a', peers: [{peer: 'a', ratePerSecond: 5, count: 3, lastMs: 1200}]},
		undefined,
		{total: 2, bySecond: [0, 0, 2], lastMs: 2100, lastFrom: 'b', peers: [{peer: 'a', ratePerSecond: 5, count: 0, lastMs: null}, {peer: 'b', ratePerSecond: 1, count: 2, lastMs: 2100}]},
	]);
	t.deepEqual(merged, {
		total: 5,
		bySecond: [2, 1, 2],
		lastMs: 2100,
		lastFrom: 'b',
		peers: [{peer: 'a', ratePerSecond: 10, count: 3, lastMs: 1200}, {peer: 'b', ratePerSecond: 1, count: 2, lastMs: 2100}],
	});
});

test('quiet window: ln(100 000)/rate, at least 1 s', t => {
	t.is(Math.round(quietWindowMs(1)), 11_513);
	t.is(quietWindowMs(100), 1000);
	t.is(quietWindowMs(0), 0);
});

test('the rule: the floor, a recent arrival, a stale worker, each peer\'s quiet window, too many peers', t => {
	const base = {rejectStartMs: 0, staleWorkers: 0};
	// A busy peer (100/s: window 1 s) silent since 1.2 s; a slow one (1/s: window 11.5 s) silent since the signal.
	const busy = {peer: 'lb1', ratePerSecond: 100, count: 120, lastMs: 1200};
	const slow = {peer: 'lb2', ratePerSecond: 1, count: 0, lastMs: null};
	t.like(decide({...base, figures: figures({peers: [busy], lastMs: 1200}), nowMs: 1900}), {end: false, why: 'floor'});
	t.like(decide({...base, figures: figures({peers: [busy], lastMs: 1200}), nowMs: 2600}), {end: false, why: 'recent-arrival'}, 'the figures lag: 1 s of silence must be known');
	t.like(decide({...base, figures: figures({peers: [busy], lastMs: 1200}), nowMs: 2800}), {end: true});
	t.like(decide({...base, staleWorkers: 1, figures: figures({peers: [busy], lastMs: 1200}), nowMs: 5000}), {end: false, why: 'stale-report'});
	t.like(decide({...base, figures: figures({peers: [busy, slow], lastMs: 1200}), nowMs: 5000}), {end: false, why: 'peer'}, 'a slow peer keeps it open');
	t.like(decide({...base, figures: figures({peers: [busy, slow], lastMs: 1200}), nowMs: 11_500}), {end: false, why: 'peer'});
	const decision = decide({...base, figures: figures({peers: [busy, slow], lastMs: 1200}), nowMs: 12_100});
	t.like(decision, {end: true});
	t.deepEqual(decision.peers.map(peer => [peer.peer, peer.quietMs]), [['lb1', 1000], ['lb2', 11_513]]);
	t.like(decide({...base, figures: figures({peers: [{peer: 'other', ratePerSecond: 500, count: 0, lastMs: null}]}), nowMs: 15_000}), {end: false, why: 'too-many-peers'});
	// A peer new since the signal: its rate since then.
	t.like(decide({...base, figures: figures({peers: [{peer: 'new', ratePerSecond: 0, count: 4, lastMs: 3000}], lastMs: 3000}), nowMs: 4600}), {end: false, why: 'peer'});
});

test('a worker that read the drain late (a busy loop) dates its arrivals from the signal, not from its reading', t => {
	const {clock, arrivals} = worker();
	clock.advance(10_000);
	// The signal came 1.7 s before this worker read the message.
	arrivals.begin(clock.now() - 1700);
	arrivals.arrived('10.0.0.1', undefined);
	t.like(arrivals.report(), {lastMs: 1700, bySecond: [0, 1]});
});

test('peers before and after the signal past MAX_PEERS: the excess joins other, none is dropped', t => {
	const {arrivals, serve} = worker();
	for (let i = 0; i < MAX_PEERS; i++) {
		serve({}, `10.2.${Math.floor(i / 250)}.${i % 250}`);
	}

	arrivals.begin();
	for (let i = 0; i < 20; i++) {
		arrivals.arrived(`10.3.0.${i}`, undefined);
	}

	const peers = arrivals.report()!.peers;
	t.true(peers.length <= MAX_PEERS + 1);
	t.like(peers.find(peer => peer.peer === 'other'), {count: 20});
	t.like(decide({figures: mergeArrivals([arrivals.report()]), nowMs: 15_000, rejectStartMs: 0, staleWorkers: 0}), {end: false, why: 'too-many-peers'});
});

test('without a reader of the rates, no peer is told apart while serving: no address is read, one counter for all; the arrivals from the signal on are counted as before', t => {
	const clock = new FakeClock();
	const arrivals = new Arrivals(clock, {perPeer: false});
	let lookups = 0;
	const socket = (address: string) => ({
		get remoteAddress() {
			lookups++;
			return address;
		},
	});
	const serve = (connection: Counted, peer: {remoteAddress: string}): void => {
		(connection[PEER_COUNTER] ?? arrivals.counterFor(connection, peer, undefined)).n++;
	};

	const lb1 = {};
	const lb2 = {};
	for (let i = 0; i < 5; i++) {
		serve(lb1, socket('10.0.0.1'));
		serve(lb2, socket('10.0.0.2'));
		clock.advance(1000);
	}

	t.is(lookups, 0, 'no getpeername(2) while serving');
	t.is(lb1[PEER_COUNTER as keyof typeof lb1], lb2[PEER_COUNTER as keyof typeof lb2], 'one counter');
	arrivals.begin();
	arrivals.arrived('10.0.0.1', undefined);
	t.like(arrivals.report(), {total: 1, lastFrom: '10.0.0.1', peers: [{peer: '10.0.0.1', ratePerSecond: 0, count: 1}]});
});

test('a bursty peer (30 requests every 6 s, a batch job): its longest lull before the signal is reported, and its window covers it with a margin', t => {
	const {clock, arrivals, serve} = worker();
	const batch = {};
	const steady = {};
	for (let second = 0; second < 90; second++) {
		if (second % 6 === 0) {
			for (let i = 0; i < 30; i++) {
				serve(batch, '10.0.0.7');
			}
		}

		for (let i = 0; i < 20; i++) {
			serve(steady, '10.0.0.1');
		}

		clock.advance(1000);
	}

	arrivals.begin();
	const peers = Object.fromEntries(arrivals.report()!.peers.map(peer => [peer.peer, peer]));
	t.is(peers['10.0.0.7']!.longestGapMs, 7000, 'five silent seconds between bursts: at most 7 s');
	t.is(peers['10.0.0.1']!.longestGapMs, undefined, 'a peer that never missed a second has no lull');
	const merged = mergeArrivals([arrivals.report()]);
	const decision = decide({figures: merged, nowMs: 9000, rejectStartMs: 0, staleWorkers: 0});
	t.like(decision, {end: false, why: 'peer'}, 'the steady rule alone (rate 5/s: 2.3 s) would end in its first lull');
	t.deepEqual(decision.peers.map(peer => [peer.peer, peer.quietMs]), [['10.0.0.1', 1000], ['10.0.0.7', 10_500]]);
	t.like(decide({figures: merged, nowMs: 11_000, rejectStartMs: 0, staleWorkers: 0}), {end: true});
	// Over two workers, a lull is one in each: the shortest bounds it; a worker that saw none says there was none.
	const report = arrivals.report()!;
	const other = {...report, peers: report.peers.map(peer => (peer.peer === '10.0.0.7' ? {...peer, longestGapMs: 9000} : {...peer, longestGapMs: 3000}))};
	const both = Object.fromEntries(mergeArrivals([report, other]).peers.map(peer => [peer.peer, peer.longestGapMs]));
	t.deepEqual(both, {'10.0.0.7': 7000, '10.0.0.1': undefined});
});

test('a process younger than the rate window: its rate counts from its first request, not from its first snapshot', t => {
	const {clock, arrivals, serve} = worker();
	const slow = {};
	for (let second = 0; second < 25; second++) {
		serve(slow, '10.0.0.5');
		clock.advance(1000);
	}

	arrivals.begin();
	const peer = arrivals.report()!.peers.find(entry => entry.peer === '10.0.0.5')!;
	t.is(Math.round(peer.ratePerSecond), 1);
});

test('one address whose rate falls after the signal (200 -> 20 -> 2 per second, a sidecar or SNAT in front of many senders): its window follows the slower rate, widened by the fall', t => {
	const {clock, arrivals, serve} = worker();
	const sidecar = {};
	for (let tick = 0; tick < 600; tick++) {
		for (let i = 0; i < 20; i++) {
			serve(sidecar, '10.0.0.9');
		}

		clock.advance(100);
	}

	arrivals.begin();
	for (const [perSecond, seconds] of [[20, 3], [2, 5]] as const) {
		for (let i = 0; i < perSecond * seconds; i++) {
			clock.advance(1000 / perSecond);
			arrivals.arrived('10.0.0.9', undefined);
		}
	}

	const peer = arrivals.report()!.peers[0]!;
	t.true(Math.abs(peer.recentPerSecond! - 2) < 0.5, `its last 5 s: about 2 a second (${peer.recentPerSecond})`);
	const figures = mergeArrivals([arrivals.report()]);
	const {peers} = decide({figures, nowMs: 9000, rejectStartMs: 0, staleWorkers: 0});
	// ln(100 000) / 2 = 5.8 s, times the fall (200 / 2 = 100): longer than any reject period.
	t.true(peers[0]!.quietMs > 60_000, String(peers[0]!.quietMs));
	// Steady since the signal (no fall): the busy peer's 1 s.
	const steady = mergeArrivals([{...arrivals.report()!, peers: [{...peer, recentPerSecond: 190}]}]);
	t.is(decide({figures: steady, nowMs: 9000, rejectStartMs: 0, staleWorkers: 0}).peers[0]!.quietMs, 1000);
});

test('fresh figures (every worker\'s answer to a request made at a moment) count silence up to that moment, with no report lag', t => {
	const busy = {peer: 'lb1', ratePerSecond: 100, count: 120, lastMs: 1200};
	const base = {rejectStartMs: 0, staleWorkers: 0, figures: figures({peers: [busy], lastMs: 1200})};
	t.like(decide({...base, nowMs: 2300}), {end: false, why: 'recent-arrival'}, 'reports may be 500 ms old: 600 ms known');
	t.like(decide({...base, nowMs: 2300, freshUntilMs: 2250}), {end: true}, 'fresh up to 2.25 s: 1.05 s of silence known');
});

test('a pod that has counted for 3 s waits until it has looked 10 s, before and after the signal together: a slow peer may not have shown yet', t => {
	const {clock, arrivals, serve} = worker({young: true});
	const busy = {};
	for (let tick = 0; tick < 30; tick++) {
		for (let i = 0; i < 5; i++) {
			serve(busy, '10.0.0.1');
		}

		clock.advance(100);
	}

	arrivals.begin();
	const figures = mergeArrivals([arrivals.report()]);
	t.is(figures.observedMs, 3000);
	t.like(decide({figures, nowMs: 6900, rejectStartMs: 0, staleWorkers: 0}), {end: false, why: 'young'}, '3 s before the signal and 6.9 s after');
	t.like(decide({figures, nowMs: 7000, rejectStartMs: 0, staleWorkers: 0}), {end: true});
	t.like(decide({figures: {...figures, observedMs: undefined}, nowMs: 4000, rejectStartMs: 0, staleWorkers: 0}), {end: true}, 'an older helper does not say: no wait');
});

test('a server taken during the drain (a candidate that listened after the signal): the signal came before it could count, observedMs is 0, never negative (the report must pass the protocol\'s check)', t => {
	const clock = new FakeClock();
	clock.advance(10_000);
	const arrivals = new Arrivals(clock);
	arrivals.begin(5000);
	t.is(arrivals.report()!.observedMs, 0);
});

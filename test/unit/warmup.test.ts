// A replacement's warm-up (src/worker/warmup.ts): no connections until its
// readiness checks pass, the failures told to the primary as they change, the
// app's own maxConnections given back, and the probe answered 200 meanwhile.
import http from 'node:http';
import test from 'ava';
import {pEvent} from 'p-event';
import type {ToPrimary} from '../../src/protocol.js';
import {Readiness} from '../../src/worker/readiness.js';
import {Warmup} from '../../src/worker/warmup.js';
import {captureLogger} from '../helpers/fakes.js';

/** Resolves once `done()` holds, looking after each turn of the event loop. */
async function until(done: () => boolean): Promise<void> {
	while (!done()) {
		await new Promise(resolve => {
			setImmediate(resolve);
		});
	}
}

function rig(roundRobin = true) {
	const sent: ToPrimary[] = [];
	const {logger} = captureLogger('worker');
	const warmup = new Warmup(message => {
		sent.push(message);
	}, logger, roundRobin);
	return {sent, warmup};
}

test('refuses the round-robin\'s connections until every check of every server passes, then gives back the app\'s own limit', async t => {
	const {sent, warmup} = rig();
	let warm = false;
	const a = http.createServer();
	const b = http.createServer();
	b.maxConnections = 500;
	const checks = new Readiness({warm: () => warm || Promise.reject(new Error('cache not loaded'))}, 1000);
	warmup.add(a);
	warmup.addChecks(checks);
	warmup.add(b);
	t.is(a.maxConnections, -1);
	t.is(b.maxConnections, -1);
	t.true(warmup.warming);
	await until(() => sent.length > 0);
	t.deepEqual(sent, [{type: 'not-ready', failures: ['warm: Error: cache not loaded']}]);
	// The app sets its own limit while we refuse: still refusing, and its value kept.
	a.maxConnections = 2000;
	t.is(a.maxConnections, -1);
	warm = true;
	// The next poll sees it.
	await until(() => sent.length > 1);
	t.deepEqual(sent[1], {type: 'ready'});
	t.false(warmup.warming);
	t.is(a.maxConnections, 2000, 'the limit the app set meanwhile');
	t.is(b.maxConnections, 500, 'the app\'s own limit is back');
});

test('the readiness probe answers ready while warming (the other workers serve), then runs the app\'s checks', async t => {
	const {warmup} = rig();
	const checks = new Readiness({db: () => false}, 1000);
	const probe = warmup.probeFor(checks)!;
	warmup.add(http.createServer());
	warmup.addChecks(checks);
	t.is(await probe.probe(), undefined);
	warmup.stop();
	t.false(warmup.warming);
	t.regex(String(await probe.probe()), /db: not ready/);
	t.is(warmup.probeFor(undefined), undefined, 'a server without checks answers ready anyway');
});

test('without round-robin (NODE_CLUSTER_SCHED_POLICY=none), connections cannot be refused without dropping them: left alone', async t => {
	const {sent, warmup} = rig(false);
	const server = http.createServer();
	warmup.add(server);
	t.is(server.maxConnections, undefined as unknown as number);
	await until(() => sent.length > 0);

	t.deepEqual(sent, [{type: 'ready'}], 'no checks: ready at once');
});

test('an exclusive listen gets a handle of its own: given back its limit as it listens', async t => {
	const {warmup} = rig();
	const server = http.createServer();
	t.teardown(() => server.close());
	warmup.add(server);
	warmup.addChecks(new Readiness({never: () => false}, 1000));
	t.is(server.maxConnections, -1);
	server.listen(0, '127.0.0.1');
	await pEvent(server, 'listening');
	t.is(server.maxConnections, undefined as unknown as number);
	warmup.stop();
});

test('serve-now (nobody else serves): the refusals end at once, ready or not; servers attached later are not refused', t => {
	const {warmup} = rig();
	const a = http.createServer();
	warmup.add(a);
	warmup.addChecks(new Readiness({never: () => false}, 1000));
	t.is(a.maxConnections, -1);
	warmup.serveNow();
	t.is(a.maxConnections, undefined as unknown as number);
	const b = http.createServer();
	warmup.add(b);
	t.is(b.maxConnections, undefined as unknown as number);
	t.true(warmup.warming, 'still warming up: the primary waits for ready before it counts the slot replaced');
	warmup.stop();
});

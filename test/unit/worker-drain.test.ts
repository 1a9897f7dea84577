// A worker's drain phases with a fake clock: each transition at its exact
// moment, the filters' mode following the phase, hooks, the report to the host.
import test from 'ava';
import {once} from 'node:events';
import http from 'node:http';
import net, {type AddressInfo} from 'node:net';
import {setImmediate as nextTurn} from 'node:timers/promises';
import {pEvent} from 'p-event';
import {DEFAULT_WORKER_SETTINGS} from '../../src/settings.js';
import {LISTEN_SETTLE_MS} from '../../src/timeline.js';
import {ProcessDrain, type DrainSummary} from '../../src/worker/drain.js';
import {UPGRADE_CLOSE_WAIT_MS} from '../../src/worker/long-lived.js';
import {modeFor} from '../../src/worker/phase.js';
import {Mode} from '../../src/worker/filter.js';
import {BLOCKING_LISTENER_MS} from '../../src/worker/long-lived.js';
import {captureLogger, FakeClock} from '../helpers/fakes.js';
import {client, RawConnection, UPGRADE_REQUEST} from '../helpers/http.js';

async function rig(t: import('ava').ExecutionContext, {listen = false, exitListeners = []}: {listen?: boolean; exitListeners?: Array<(code: number) => unknown>} = {}) {
	const clock = new FakeClock();
	const {logger, lines, messages} = captureLogger('worker');
	// Not the process's: those are the test runner's.
	const drain = new ProcessDrain(DEFAULT_WORKER_SETTINGS, logger, clock, {exitListeners: () => exitListeners});
	const held: http.ServerResponse[] = [];
	const server = http.createServer((_request, response) => {
		held.push(response);
	});
	drain.addServer(server);
	const reports: number[] = [];
	const progress: Array<{inflight: number; upgrades: number; streams: number}> = [];
	const finished: DrainSummary[] = [];
	let resolveFinished!: () => void;
	const whenFinished = new Promise<void>(resolve => {
		resolveFinished = resolve;
	});
	drain.setHost({
		progress({inflight, upgrades, streams}) {
			reports.push(inflight);
			progress.push({inflight, upgrades, streams});
		},
		hooksStarting(_counts, proceed: () => void) {
			proceed();
		},
		finish(summary) {
			finished.push(summary);
			resolveFinished();
		},
	});
	let port = 0;
	if (listen) {
		server.listen(0, '127.0.0.1');
		await pEvent(server, 'listening');
		port = (server.address() as AddressInfo).port;
	}

	t.teardown(() => {
		server.closeAllConnections();
		server.close();
	});
	return {clock, drain, server, held, reports, progress, finished, whenFinished, lines, messages, port};
}

test('modeFor: the one mapping from phase to filter mode', t => {
	t.is(modeFor('serving'), Mode.SERVING);
	t.is(modeFor('serve'), Mode.DRAIN_SERVE);
	t.is(modeFor('retiring'), Mode.RETIRE);
	for (const phase of ['reject', 'closing', 'hooks', 'done'] as const) {
		t.is(modeFor(phase), Mode.REJECT, phase);
	}
});

test('serve -> reject -> closing -> hooks -> done, each at its moment', async t => {
	const r = await rig(t);
	const order: string[] = [];
	r.drain.addHook(() => {
		order.push(`hook at ${r.clock.now()} in ${r.drain.phaseName}`);
	});
	r.drain.begin({servePeriodMs: 1000, rejectPeriodMs: 2000, gracePeriodMs: 10_000});
	t.is(r.drain.phaseName, 'serve');
	t.deepEqual(r.reports, [0], 'reports at once');
	r.clock.advance(999);
	t.is(r.drain.phaseName, 'serve');
	r.clock.advance(1);
	t.is(r.drain.phaseName, 'reject');
	r.clock.advance(1999);
	t.is(r.drain.phaseName, 'reject');
	r.clock.advance(1);
	// Nothing in flight: closing goes straight on to the hooks.
	t.deepEqual(order, ['hook at 3000 in hooks']);
	await r.whenFinished;
	t.is(r.drain.phaseName, 'done');
	t.deepEqual(r.finished, [{durationMs: 3000, served: 0, aborted: 0, rejected: 0, redirected: 0, closedLongLived: 0, longLivedCut: 0, hooksFailed: 0}]);
	t.is(r.clock.waiting, 0, 'every timer cleared');
	t.deepEqual(r.messages().filter(message => message !== 'rejected requests while draining'), ['drain started', 'rejecting new requests', 'stopped listening; waiting for requests in flight', 'running shutdown hooks']);
	t.like(r.lines[0], {servePeriodMs: 1000, rejectPeriodMs: 2000, gracePeriodMs: 10_000});
});

test('a drain that came while the app was still starting (settle()): the hooks wait for its first server to listen and LISTEN_SETTLE_MS more, for the rest of the app to come up', async t => {
	const r = await rig(t);
	const order: string[] = [];
	r.drain.addHook(() => {
		order.push(`hook at ${r.clock.now()}`);
	});
	r.drain.settle(30_000);
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 300, gracePeriodMs: 60_000});
	r.clock.advance(2500);
	t.is(r.drain.phaseName, 'closing', 'past the reject phase and the settle time, waiting for the app to listen');
	r.server.listen(0, '127.0.0.1');
	await once(r.server, 'listening');
	r.clock.advance(LISTEN_SETTLE_MS - 1);
	t.deepEqual(order, [], 'not before the settle time since its listen');
	r.clock.advance(1);
	t.deepEqual(order, [`hook at ${2500 + LISTEN_SETTLE_MS}`]);
	await r.whenFinished;
});

test('settle() with no listen: the hooks wait as long as they were told (the rest of --listen-timeout), no longer', async t => {
	const r = await rig(t);
	r.drain.settle(5000);
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 300, gracePeriodMs: 60_000});
	r.clock.advance(4999);
	t.is(r.drain.phaseName, 'closing');
	r.clock.advance(1);
	await r.whenFinished;
	t.is(r.drain.phaseName, 'done');
});

test('no serve period: the reject phase starts at once', async t => {
	const r = await rig(t);
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 500, gracePeriodMs: 10_000});
	t.is(r.drain.phaseName, 'reject');
});

test('begin() is idempotent', async t => {
	const r = await rig(t);
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 500, gracePeriodMs: 10_000});
	r.drain.begin({servePeriodMs: 5000, rejectPeriodMs: 5000, gracePeriodMs: 10_000});
	t.is(r.messages().filter(message => message === 'drain started').length, 1);
	r.clock.advance(499);
	t.is(r.drain.phaseName, 'reject', 'the first timeline holds');
	r.clock.advance(1);
	// No hooks and nothing in flight: straight through to the end.
	t.is(r.drain.phaseName, 'done');
});

test('closing waits for the requests in flight, then the hooks run in order; one that throws is logged', async t => {
	const r = await rig(t, {listen: true});
	const ran: string[] = [];
	r.drain.addHook(() => {
		ran.push('first');
		throw new Error('pool already closed');
	});
	r.drain.addHook(async () => {
		ran.push('second');
	});
	const request = client(`http://127.0.0.1:${r.port}/work`);
	await pEvent(r.server, 'request');
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 100, gracePeriodMs: 10_000});
	r.clock.advance(100);
	t.is(r.drain.phaseName, 'closing');
	t.is(r.drain.inflight, 1);
	t.deepEqual(ran, []);
	r.clock.advance(250);
	r.held[0]!.end('done');
	t.is((await request).headers.connection, 'close');
	await r.whenFinished;

	t.deepEqual(ran, ['first', 'second']);
	t.like(r.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'), {level: 'error'});
	t.like(r.finished[0], {served: 1});
	t.is(r.reports[0], 1, 'the host heard the count at the start');
});

test('retiring: stops listening at once, leaves when idle and the linger is over', async t => {
	const r = await rig(t, {listen: true});
	r.drain.retire(1000);
	t.is(r.drain.phaseName, 'retiring');
	t.false(r.server.listening);
	r.clock.advance(999);
	t.is(r.drain.phaseName, 'retiring');
	r.clock.advance(1);
	t.is(r.drain.phaseName, 'done', 'no hooks: over at once');
	t.deepEqual(r.finished, [{durationMs: 1000, served: 0, aborted: 0, rejected: 0, redirected: 0, closedLongLived: 0, longLivedCut: 0, hooksFailed: 0}]);
});

test('a server attached in the middle of a drain joins in the current phase', async t => {
	const r = await rig(t);
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	const late = http.createServer();
	late.listen(0, '127.0.0.1');
	await pEvent(late, 'listening');
	t.teardown(() => late.close());
	r.drain.addServer(late);
	const rejected = await client(`http://127.0.0.1:${(late.address() as AddressInfo).port}/`);
	t.is(rejected.statusCode, 503, 'rejects at once, as the others do');
	t.true(late.listening, 'still listening in the reject phase');
	r.clock.advance(1000);
	t.false(late.listening, 'stops with the others');
});

test('hooks are visible: a line when they start, one per hook past a second (by name), a warning as the deadline nears', async t => {
	const r = await rig(t);
	let release!: () => void;
	r.drain.addHook(async function closeDatabasePool() {
		await new Promise<void>(resolve => {
			release = resolve;
		});
	});
	r.drain.addHook(async () => {});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 20_000});
	r.clock.advance(1000);
	t.like(r.lines.find(line => line.msg === 'running shutdown hooks'), {hooks: ['closeDatabasePool', 'onShutdown hook 2']});
	r.clock.advance(999);
	t.false(r.messages().includes('a shutdown hook is taking more than a second'));
	r.clock.advance(1);
	t.like(r.lines.find(line => line.msg === 'a shutdown hook is taking more than a second'), {level: 'warn', hook: 'closeDatabasePool', runningForMs: 1000});
	// The deadline is at 20 s: the warning comes 5 s before it.
	r.clock.advance(12_999);
	t.false(r.messages().includes('shutdown hooks still running as the deadline nears'));
	r.clock.advance(1);
	t.like(r.lines.find(line => line.msg === 'shutdown hooks still running as the deadline nears'), {level: 'warn', hook: 'closeDatabasePool', deadlineInMs: 5000});
	t.is(r.messages().filter(message => message === 'a shutdown hook is taking more than a second').length, 1, 'one line per slow hook');
	release();
	await r.whenFinished;
	t.is(r.clock.waiting, 0);
});

test('hooks that start close to the deadline get the warning halfway there; quick hooks get no extra lines', async t => {
	const r = await rig(t);
	let release!: () => void;
	r.drain.addHook(async () => new Promise<void>(resolve => {
		release = resolve;
	}));
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 3000});
	r.clock.advance(1000);
	r.clock.advance(999);
	t.false(r.messages().includes('shutdown hooks still running as the deadline nears'));
	r.clock.advance(1);
	t.like(r.lines.find(line => line.msg === 'shutdown hooks still running as the deadline nears'), {hook: 'onShutdown hook 1', deadlineInMs: 1000});
	release();
	await r.whenFinished;

	const quick = await rig(t);
	quick.drain.addHook(function quickHook() {});
	quick.drain.begin({servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 3000});
	quick.clock.advance(0);
	await quick.whenFinished;
	t.deepEqual(quick.messages().filter(message => /hook/.test(message)), ['running shutdown hooks']);
});

test('the app\'s own signal listeners run after the onShutdown hooks, when every request is done, for the signal that started the drain', async t => {
	const r = await rig(t);
	const order: string[] = [];
	let proceeds = 0;
	let exit: string | undefined;
	r.drain.setHost({
		progress() {},
		hooksStarting({served, rejected}, proceed) {
			order.push(`hooks message ${served}/${rejected}`);
			proceeds++;
			// The primary acknowledges later: nothing runs before.
			setImmediate(proceed);
		},
		finish(_summary, how) {
			order.push('finish');
			exit = how;
		},
	});
	r.drain.addHook(() => {
		order.push('onShutdown');
	});
	r.drain.setAppShutdown({
		has: (signal, reason) => signal === 'SIGQUIT' && reason === 'shutdown',
		names: () => ['SIGQUIT listener'],
		async run(signal, reason) {
			order.push(`app listeners for ${signal} (${reason})`);
			return 'idle';
		},
	});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 3000}, 'SIGQUIT');
	r.clock.advance(0);
	t.deepEqual(order, ['hooks message 0/0']);
	for (let turn = 0; turn < 10 && !order.includes('finish'); turn++) {
		await nextTurn();
	}

	t.deepEqual(order, ['hooks message 0/0', 'onShutdown', 'app listeners for SIGQUIT (shutdown)', 'finish']);
	t.is(proceeds, 1);
	t.is(exit, 'own', 'the app\'s work ended with nothing left: the process ends by itself');
});

test('an app with listeners for another signal only: the hooks run and the process is exited', async t => {
	const r = await rig(t);
	r.drain.setAppShutdown({
		has: signal => signal === 'SIGHUP',
		names: () => ['SIGHUP listener'],
		async run() {
			t.fail('not for this drain\'s signal');
			return 'idle';
		},
	});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 3000}, 'SIGTERM');
	r.clock.advance(0);
	await r.whenFinished;
	t.like(r.finished[0], {hooksFailed: 0});
});

test('failed hooks and app listeners are counted, each passed to the host before the next runs', async t => {
	const r = await rig(t);
	const order: string[] = [];
	let summary: DrainSummary | undefined;
	let exit: string | undefined;
	r.drain.setHost({
		progress() {},
		hooksStarting(_counts, proceed) {
			proceed();
		},
		async hookFailed(name) {
			order.push(`failed: ${name}`);
			await nextTurn();
			order.push(`told: ${name}`);
		},
		finish(finished, how) {
			summary = finished;
			exit = how;
		},
	});
	r.drain.addHook(function closePool() {
		throw new Error('pool already closed');
	});
	r.drain.addHook(() => {
		order.push('second hook');
	});
	r.drain.setAppShutdown({
		has: (_signal, reason) => reason === 'reload',
		names: () => ['SIGTERM listener shutdown'],
		async run(_signal, _reason, onFailure) {
			await onFailure('SIGTERM listener shutdown');
			return 'self-signal';
		},
	});
	r.drain.retire(0, 'SIGUSR2');
	r.clock.advance(0);
	for (let turn = 0; turn < 10 && summary === undefined; turn++) {
		await nextTurn();
	}

	t.deepEqual(order, ['failed: closePool', 'told: closePool', 'second hook', 'failed: SIGTERM listener shutdown', 'told: SIGTERM listener shutdown']);
	t.like(summary, {hooksFailed: 2});
	t.is(exit, 'now', 'the app signalled itself: it expects to end now');
});

test('onDrain: each listener is told once when the drain starts, with the reason, the time until long-lived connections are closed and the close code; one that throws is logged', async t => {
	const r = await rig(t);
	const notices: unknown[] = [];
	r.drain.addDrainListener(notice => notices.push(notice));
	r.drain.addDrainListener(function brokenListener() {
		throw new Error('no sockets here');
	});
	r.drain.addDrainListener(async () => {
		throw new Error('async too');
	});
	r.drain.begin({servePeriodMs: 2000, rejectPeriodMs: 3000, gracePeriodMs: 10_000});
	r.drain.begin({servePeriodMs: 2000, rejectPeriodMs: 3000, gracePeriodMs: 10_000});
	t.deepEqual(notices, [{reason: 'shutdown', closeInMs: 5000, closeCode: 1001}]);
	await nextTurn();
	t.deepEqual(r.lines.filter(line => line.msg === 'an onDrain listener failed').map(line => line['listener']), ['brokenListener', 'anonymous']);

	// Registered after the drain began: told at once, with the time left.
	r.clock.advance(1500);
	const late = new Promise(resolve => {
		r.drain.addDrainListener(resolve);
	});
	t.deepEqual(await late, {reason: 'shutdown', closeInMs: 3500, closeCode: 1001});
	t.throws(() => r.drain.addDrainListener('x' as never), {instanceOf: TypeError});
});

test('onDrain: a listener that holds the event loop is named with how long it held it; a quick one is not', async t => {
	const r = await rig(t);
	r.drain.addDrainListener(function quickListener() {
		r.clock.advance(BLOCKING_LISTENER_MS - 1);
	});
	r.drain.addDrainListener(function closeEverythingSynchronously() {
		// A synchronous loop past the reject phase's end: its timer fires late, after this.
		r.clock.advance(4000);
	});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 3000, gracePeriodMs: 10_000});
	t.deepEqual(r.lines.filter(line => line.msg === 'an onDrain listener held the event loop: requests and the drain\'s timers waited for it; do slow work asynchronously').map(({listener, blockedMs, closeInMs}) => ({listener, blockedMs, closeInMs})), [
		{listener: 'closeEverythingSynchronously', blockedMs: 4000, closeInMs: 2501},
	]);
});

test('onDrain on a reload: reason reload, the linger, 1012', async t => {
	const r = await rig(t);
	const notices: unknown[] = [];
	r.drain.addDrainListener(notice => notices.push(notice));
	r.drain.retire(1000);
	t.deepEqual(notices, [{reason: 'reload', closeInMs: 1000, closeCode: 1012}]);
});

test('an event stream left open never holds the drain: closed when the reject phase ends, logged, counted apart; the drain is clean', async t => {
	const r = await rig(t, {listen: true});
	const streams: http.ServerResponse[] = [];
	r.server.removeAllListeners('request');
	r.server.on('request', (_request: http.IncomingMessage, response: http.ServerResponse) => {
		response.writeHead(200, {'Content-Type': 'text/event-stream'});
		response.write('data: 1\n\n');
		streams.push(response);
	});
	const ended = new Promise<string>(resolve => {
		http.get(`http://127.0.0.1:${r.port}/events`, response => {
			let body = '';
			response.setEncoding('utf8');
			response.on('data', (chunk: string) => {
				body += chunk;
			});
			response.on('end', () => resolve(body));
		});
	});
	await pEvent(r.server, 'request');
	t.is(r.drain.inflight, 1, 'serving: not sorted yet');
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	t.is(r.drain.inflight, 0, 'sorted at the drain\'s start');
	t.is(r.drain.counts.streams, 1);
	const progress = r.progress.at(-1)!;
	t.like(progress, {inflight: 0, upgrades: 0, streams: 1});
	r.clock.advance(1000);
	t.is(await ended, 'data: 1\n\n', 'ended cleanly: EventSource reconnects');
	await r.whenFinished;
	t.like(r.finished[0], {closedLongLived: 1, longLivedCut: 0});
	t.like(r.lines.find(line => String(line.msg).startsWith('closed the long-lived connections still open')), {streams: 1, upgrades: 0, reason: 'shutdown'});
});

test('WebSockets that never answer the close frame are cut UPGRADE_CLOSE_WAIT_MS after it, each counted once in longLivedCut; one that closes in time is not', async t => {
	const r = await rig(t, {listen: true});
	const accepted: net.Socket[] = [];
	r.server.on('upgrade', (_request: http.IncomingMessage, socket: net.Socket) => {
		socket.on('error', () => undefined);
		// What a WebSocket library does once its client has answered: close its side too.
		socket.on('end', () => socket.end());
		socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
		accepted.push(socket);
	});
	const clients = await Promise.all([0, 1, 2, 3].map(async () => {
		const socket = net.connect(r.port, '127.0.0.1');
		socket.on('error', () => undefined);
		socket.write(UPGRADE_REQUEST);
		await once(socket, 'data');
		return socket;
	}));
	t.teardown(() => {
		for (const socket of clients) {
			socket.destroy();
		}
	});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	t.is(r.drain.counts.upgrades, 4);
	const frames = clients.map(async socket => once(socket, 'data'));
	r.clock.advance(1000);
	for (const [frame] of await Promise.all(frames) as Array<[Buffer]>) {
		t.is(frame.readUInt16BE(2), 1001);
	}

	// One client closes in time; the other three never answer.
	const answered = once(accepted[0]!, 'close');
	clients[0]!.end();
	await answered;
	r.clock.advance(UPGRADE_CLOSE_WAIT_MS - 1);
	t.is(r.drain.counts.upgrades, 3);
	t.is(r.finished.length, 0, 'waiting for them to finish closing');
	const cut = accepted.slice(1).map(async socket => once(socket, 'close'));
	r.clock.advance(1);
	t.is(r.drain.counts.upgrades, 0, 'off the count as they are cut, before their close comes');
	await Promise.all(cut);
	await r.whenFinished;
	t.like(r.finished[0], {closedLongLived: 4, longLivedCut: 3});
	t.like(r.lines.find(line => line.msg === 'long-lived connections did not finish closing in time; destroying them'), {upgrades: 3, streams: 0, waitedMs: UPGRADE_CLOSE_WAIT_MS});
});

test('a report goes out when only the served count moved: a worker killed later is judged by it', async t => {
	const r = await rig(t, {listen: true});
	const served: number[] = [];
	r.drain.setHost({
		progress(counts) {
			served.push(counts.served);
		},
		hooksStarting(_counts, proceed) {
			proceed();
		},
		finish() {},
	});
	const first = client(`http://127.0.0.1:${r.port}/first`);
	await pEvent(r.server, 'request');
	r.drain.begin({servePeriodMs: 5000, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	t.deepEqual(served, [0]);
	// Between two reports one request arrives and another finishes: inflight stays 1.
	const second = client(`http://127.0.0.1:${r.port}/second`);
	await pEvent(r.server, 'request');
	r.held[0]!.end('done');
	await first;
	r.clock.advance(250);
	t.deepEqual(served, [0, 1], 'reported though inflight did not change');
	r.held[1]!.end('done');
	await second;
});

test('a drain\'s signal while retiring: the worker retires on, tells its host its counts of that moment once, and logs them; its counts still run from the retire', async t => {
	const r = await rig(t, {listen: true});
	const atSignal: Array<{served: number; inflight: number}> = [];
	let finished!: () => void;
	const whenFinished = new Promise<void>(resolve => {
		finished = resolve;
	});
	r.drain.setHost({
		progress() {},
		hooksStarting(_counts, proceed) {
			proceed();
		},
		finish(summary) {
			r.finished.push(summary);
			finished();
		},
		signalledWhileRetiring({served, inflight}) {
			atSignal.push({served, inflight});
		},
	});
	const requests = ['/before', '/across'].map(async path => client(`http://127.0.0.1:${r.port}${path}`));
	await pEvent(r.server, 'request', {multiArgs: false, filter: () => r.held.length === 2});
	r.drain.retire(1000);
	r.held[0]!.end('done');
	await requests[0];
	await nextTurn();
	r.drain.drainWhileRetiring({servePeriodMs: 0, rejectPeriodMs: 5000, gracePeriodMs: 10_000});
	t.is(r.drain.phaseName, 'retiring', 'not a drain of its own: listening stopped at the retire');
	t.deepEqual(atSignal, [{served: 1, inflight: 1}]);
	t.like(r.lines.find(line => line.msg?.startsWith('drain signal while retiring') === true), {served: 1, inflight: 1, gracePeriodMs: 10_000});
	r.drain.drainWhileRetiring({servePeriodMs: 0, rejectPeriodMs: 5000, gracePeriodMs: 10_000});
	t.is(atSignal.length, 1, 'once');
	r.held[1]!.end('done');
	await requests[1];
	r.clock.advance(1000);
	await whenFinished;
	t.like(r.finished[0], {served: 2, aborted: 0, rejected: 0}, 'the worker\'s own summary runs from the retire; the primary subtracts');
});

test('drainWhileRetiring does nothing in a worker that is not retiring', async t => {
	const r = await rig(t, {listen: true});
	const request = client(`http://127.0.0.1:${r.port}/one`);
	await pEvent(r.server, 'request');
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	r.held[0]!.end('done');
	await request;
	await nextTurn();
	r.drain.drainWhileRetiring({servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	t.false(r.lines.some(line => line.msg?.startsWith('drain signal while retiring') === true), 'a second drain message changes nothing');
});

test('a drain\'s signal while retiring: a request on a connection the retiree kept open counts as an arrival after the signal', async t => {
	const r = await rig(t, {listen: true});
	const idle = await RawConnection.open(r.port);
	t.teardown(() => {
		idle.close();
	});
	const first = idle.request('/first');
	await pEvent(r.server, 'request');
	r.held[0]!.end('done');
	t.is((await first).status, 200);
	r.drain.retire(1000);
	t.is(r.drain.arrivals.report(), undefined, 'a retire alone counts no arrivals');
	r.drain.drainWhileRetiring({servePeriodMs: 0, rejectPeriodMs: 5000, gracePeriodMs: 10_000}, Date.now());
	const late = idle.request('/late');
	await pEvent(r.server, 'request');
	r.held[1]!.end('done');
	t.is((await late).status, 200, 'served by the retiree, as in its linger');
	t.like(r.drain.arrivals.report(), {total: 1, lastFrom: '127.0.0.1'});
});

test.serial('the app\'s beforeExit listeners run last, once, awaited; one that rejects is counted like a hook; none runs twice after an idle end', async t => {
	const order: string[] = [];
	let release!: () => void;
	const r = await rig(t, {exitListeners: [
		async function disconnectPrisma(code: number) {
			order.push(`beforeExit ${code}`);
			await new Promise<void>(resolve => {
				release = resolve;
			});
			order.push('disconnected');
		},
		async function flushQueue() {
			throw new Error('queue gone');
		},
	]});
	r.drain.addHook(() => {
		order.push('onShutdown');
	});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 3000});
	r.clock.advance(0);
	for (let turn = 0; turn < 10 && !release; turn++) {
		await nextTurn();
	}

	t.deepEqual(order, ['onShutdown', 'beforeExit 0'], 'called with the exit code, after the hooks');
	t.is(r.finished.length, 0, 'the drain waits for the promise it returned');
	release();
	await r.whenFinished;
	t.deepEqual(order, ['onShutdown', 'beforeExit 0', 'disconnected']);
	t.is(r.finished[0]!.hooksFailed, 1);
	t.deepEqual(r.lines.filter(line => line.msg === 'a shutdown hook failed; running the rest').map(line => line['hook']), ['beforeExit listener flushQueue']);
	t.like(r.lines.find(line => line.msg === 'running the app\'s beforeExit listeners'), {listeners: ['beforeExit listener disconnectPrisma', 'beforeExit listener flushQueue']});

	// When the app's own shutdown left the loop empty, Node emitted 'beforeExit' itself.
	const idle = await rig(t, {exitListeners: [() => t.fail('Node already ran it')]});
	idle.drain.setAppShutdown({has: () => true, names: () => ['SIGTERM listener'], run: async () => 'idle'});
	idle.drain.begin({servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 3000});
	idle.clock.advance(0);
	await idle.whenFinished;
});

test.serial('a hook that sets process.exitCode is named in the log with the code; one that sets a clean code is not', async t => {
	const before = process.exitCode;
	t.teardown(() => {
		process.exitCode = before;
	});
	const r = await rig(t);
	r.drain.addHook(async function closePool() {
		process.exitCode = 143;
	});
	r.drain.addHook(async function reportFailure() {
		process.exitCode = 2;
	});
	r.drain.begin({servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 3000});
	r.clock.advance(0);
	await r.whenFinished;
	process.exitCode = before;
	t.deepEqual(r.lines.filter(line => line.msg === 'the app\'s shutdown set a failing exit code (process.exitCode)').map(line => [line['hook'], line['exitCode']]), [['reportFailure', 2]]);
	t.is(r.finished[0]!.hooksFailed, 0, 'counted by the exit code, by the primary or standalone, not twice');
});

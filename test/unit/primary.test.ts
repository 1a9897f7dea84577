// The primary's drain, reload and restart policy with fake workers and a fake
// clock (test/helpers/fakes.ts): each transition, exactly, without processes.
import test from 'ava';
import {ExitCode} from '../../src/exit-codes.js';
import {Primary, RETIRE_LINGER_MS} from '../../src/primary/index.js';
import {DEFAULT_PRIMARY_OPTIONS} from '../../src/primary/options.js';
import {clusterStatus} from '../../src/primary/status.js';
import {exitReason} from '../../src/primary/worker-record.js';
import {DEFAULT_SETTINGS} from '../../src/settings.js';
import {DUPLICATE_SIGNAL_MS} from '../../src/timeline.js';
import {captureLogger, FAKE_TIMELINE, fakeEdges, fakePrimary, flush} from '../helpers/fakes.js';

const TIMELINE = FAKE_TIMELINE;
const primary = fakePrimary;

test('drain: every worker drains and exits -> exit 0, summary "clean"', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	const {signalAt, ...drain} = a!.received[0]!;
	t.deepEqual(drain, {v: 1, type: 'drain', ...TIMELINE, signal: 'SIGTERM'}, 'the whole timeline, at once, and the signal');
	t.is(a!.received.length, 1);
	t.true(Math.abs(Number(signalAt) - Date.now()) < 5000, 'when the signal came, in epoch ms: the worker times its arrivals from it');
	t.deepEqual(b!.types, ['drain']);
	p.clock.advance(6000);
	t.is(a!.disconnectCalls + b!.disconnectCalls, 0, 'attached workers drain themselves');
	a!.say({type: 'inflight', inflight: 2, served: 3, rejected: 1, upgrades: 0, streams: 0}).drained(5).exit(0);
	t.is(p.code(), undefined, 'one worker is still there');
	b!.drained(7).exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', exitCode: 0, served: 12, signal: 'SIGTERM', durationMs: 6000});
});

test('drain: a `drained` message read after the exit still counts (gone = exit + channel closed)', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.emit('exit', 0, null);
	a!.drained();
	a!.closeChannel();
	t.is(await p.done, ExitCode.OK);
	t.falsy(p.line('drain finished')?.['lost']);
});

test('drain: the deadline kills what is left with SIGKILL -> exit 3', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 1, served: 0, rejected: 0, upgrades: 0, streams: 0});
	p.clock.advance(TIMELINE.gracePeriodMs - 1);
	t.deepEqual(a!.signals, []);
	p.clock.advance(1);
	t.deepEqual(a!.signals, ['SIGKILL']);
	t.deepEqual(b!.signals, ['SIGKILL']);
	t.like(p.lines.find(line => line.msg === 'killing worker' && line['worker'] === a!.id), {inflight: 1, reason: 'deadline'});
	a!.exit(null, 'SIGKILL');
	b!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.DEADLINE);
	t.like(p.line('drain finished'), {outcome: 'forced', exitCode: 3});
});

test('drain: workers that ignore SIGKILL do not hold the primary: it finishes after the kill wait', async t => {
	const p = primary({workers: 1});
	p.serveAll();
	p.edges.signal('SIGTERM');
	p.clock.advance(TIMELINE.gracePeriodMs + 2000);
	t.is(await p.done, ExitCode.DEADLINE);
});

test('drain: the same signal twice within DUPLICATE_SIGNAL_MS is one drain; a later one kills -> exit 4', async t => {
	const p = primary();
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	p.clock.advance(DUPLICATE_SIGNAL_MS - 1);
	p.edges.signal('SIGINT');
	t.truthy(p.line('repeated signal right after the first; ignoring it'));
	t.deepEqual(a!.signals, []);
	p.clock.advance(1);
	p.edges.signal('SIGINT');
	t.deepEqual(a!.signals, ['SIGKILL']);
	for (const worker of p.cluster.live) {
		worker.exit(null, 'SIGKILL');
	}

	t.is(await p.done, ExitCode.SECOND_SIGNAL);
	t.is(p.lines.filter(line => line.msg === 'drain started').length, 1);
});

test('drain: its state says why it kills, the first reason stays; finished, the view keeps it', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	const {drain} = p.primary.view;
	t.deepEqual(drain?.state, {name: 'draining'});
	p.clock.advance(TIMELINE.gracePeriodMs - 1000);
	p.edges.signal('SIGINT');
	t.deepEqual(drain?.state, {name: 'killing', by: 'second-signal'});
	p.clock.advance(1000);
	t.truthy(p.line('grace period over; killing the workers left'));
	t.deepEqual(drain?.state, {name: 'killing', by: 'second-signal'}, 'the deadline kills again; the reason stays');
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.SECOND_SIGNAL);
	t.deepEqual(drain?.state, {name: 'finished', code: ExitCode.SECOND_SIGNAL, durationMs: TIMELINE.gracePeriodMs, forcedBy: 'second-signal'});
	t.like(p.primary.view, {state: 'stopping', drain});
});

test('drain: an attached worker that exits without saying it drained is lost -> exit 5', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.exit(1);
	b!.drained().exit(0);
	t.is(await p.done, ExitCode.WORKER_LOST);
	t.like(p.line('drain finished'), {outcome: 'forced', exitCode: 5, lost: [{worker: a!.id, killedFor: null}]});
});

test('drain: a worker that exits with 0 from its shutdown hooks (after saying so) is clean -> exit 0', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'hooks', served: 4, rejected: 1}).exit(0);
	b!.drained().exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', exitCode: 0, served: 4, rejected: 1});
	t.like(p.lines.find(line => line.msg === 'worker exited' && line['worker'] === a!.id), {level: 'info', state: 'hooks', code: 0});
	t.is(p.line('a shutdown hook exited the worker with a failure'), undefined);
});

test('drain: a non-zero exit from the shutdown hooks is a failed hook, not a lost worker: exit 7', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'hooks', served: 0, rejected: 0}).exit(3);
	b!.drained().exit(0);
	t.is(await p.done, ExitCode.HOOK_FAILED);
	t.like(p.line('a shutdown hook exited the worker with a failure'), {level: 'error', worker: a!.id, code: 3});
	t.like(p.line('drain finished'), {outcome: 'hooks-failed', hooksFailed: 1, workersLost: 0, responsesCut: 0, exitCode: 7});
	t.is(p.line('drain finished')!['lost'], undefined);
});

test('drain: exiting 143 (128 + SIGTERM) from the app\'s shutdown is the conventional clean end, not a failure', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'hooks', served: 0, rejected: 0}).exit(143);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {hooksFailed: 0, outcome: 'clean'});
	t.is(p.line('a shutdown hook exited the worker with a failure'), undefined);
});

test('drain: hooks that threw, reported before the worker exited 0 anyway, make it exit 7', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'hooks', served: 1, rejected: 0}).say({type: 'hook-failed', hook: 'closePool'}).say({type: 'hook-failed', hook: 'SIGTERM listener'}).exit(0);
	b!.drained().exit(0);
	t.is(await p.done, ExitCode.HOOK_FAILED);
	t.like(p.line('drain finished'), {level: 'error', outcome: 'hooks-failed', hooksFailed: 2, served: 1});
});

test('drain: responses cut by the deadline are counted', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 2, served: 3, rejected: 0, upgrades: 0, streams: 0});
	b!.drained().exit(0);
	p.clock.advance(TIMELINE.gracePeriodMs);
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.DEADLINE);
	t.like(p.line('drain finished'), {responsesCut: 2, outcome: 'forced'});
});

test('drain: a worker still in its hooks at the deadline is killed -> exit 3; its requests were done, so a cut hook, not a lost worker', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'hooks', served: 0, rejected: 0});
	p.clock.advance(TIMELINE.gracePeriodMs);
	t.deepEqual(a!.signals, ['SIGKILL']);
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.DEADLINE);
	t.like(p.line('drain finished'), {workersLost: 0, hooksFailed: 1, responsesCut: 0, outcome: 'forced'});
	t.is(p.line('drain finished')!['lost'], undefined);
	t.is(p.line('a shutdown hook exited the worker with a failure'), undefined);
});

test('drain: a worker without the helper is disconnected when the reject phase ends; exit 0 after it is clean', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	a!.listen();
	p.edges.signal('SIGTERM');
	p.clock.advance(TIMELINE.servePeriodMs + TIMELINE.rejectPeriodMs - 1);
	t.is(a!.disconnectCalls, 0);
	p.clock.advance(1);
	t.is(a!.disconnectCalls, 1);
	a!.exit(0);
	t.is(await p.done, ExitCode.OK);
});

test('drain: a worker that attaches after the broadcast gets the drain again, with the time spent taken off', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	p.edges.signal('SIGTERM');
	p.clock.advance(1500);
	a!.attach();
	const {signalAt, ...late} = a!.received.at(-1)!;
	t.deepEqual(late, {v: 1, type: 'drain', servePeriodMs: 0, rejectPeriodMs: 3500, gracePeriodMs: 28_500, signal: 'SIGTERM'});
	t.is(signalAt, a!.received[0]!['signalAt'], 'the same moment: the signal\'s, not the resend\'s');
	a!.drained().exit(0);
	t.is(await p.done, ExitCode.OK);
});

test('drain: no restarts; a crash mid-drain is logged with its last in-flight count', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 3, served: 0, rejected: 0, upgrades: 0, streams: 0}).exit(7);
	p.clock.advance(10_000);
	t.is(p.cluster.workers.length, 1, 'nothing forked');
	t.like(p.line('worker exited'), {code: 7, inflight: 3, level: 'info'});
	t.is(await p.done, ExitCode.WORKER_LOST);
});

/** A primary made with fake edges, `run()` not called yet: the CLI's loading window (main.ts). */
function unstartedPrimary() {
	const edges = fakeEdges();
	const {logger, lines} = captureLogger();
	const sink = {write() {}};
	const p = new Primary({
		...DEFAULT_PRIMARY_OPTIONS,
		script: '/app/server.js', args: [], workers: 2, listenTimeoutMs: 0, maxStartFailures: 1, restartDelayMs: 1, maxRestartDelayMs: 1, backoffResetMs: 1, workerTimeoutMs: 0,
	}, {logger, stdout: sink, stderr: sink}, edges);
	return {p, edges, lines};
}

test('a signal before run() ends an empty cluster with 0 and says so; no drain is reported, nothing is forked', async t => {
	const {p, edges, lines} = unstartedPrimary();
	t.true(p.startsWorkers);
	edges.signal('SIGTERM');
	t.false(p.startsWorkers, 'main.ts then logs no "starting workers"');
	t.is(await p.run(), ExitCode.OK);
	t.is(edges.cluster.workers.length, 0);
	t.like(lines.find(line => line.msg === 'signal received before any worker started: nothing to drain; exiting'), {signal: 'SIGTERM'});
	// A drain of no worker reported a reject phase that never ran.
	t.deepEqual(lines.filter(line => String(line.msg).startsWith('drain')), []);
});

test('SIGHUP before run() is ignored with a reason; the workers then start', t => {
	const {p, edges, lines} = unstartedPrimary();
	edges.signal('SIGHUP');
	t.like(lines.at(-1), {level: 'warn', msg: 'SIGHUP ignored: no worker has started yet (the ones about to start load the app as it is now)'});
	t.true(p.startsWorkers);
	void p.run();
	t.is(edges.cluster.workers.length, 2);
});

test('every signal that would kill the primary has a meaning: SIGQUIT drains, SIGUSR2 reloads, the rest are logged', async t => {
	const p = primary();
	t.deepEqual([...p.edges.handled].sort(), ['SIGALRM', 'SIGHUP', 'SIGINT', 'SIGIO', 'SIGPWR', 'SIGQUIT', 'SIGSTKFLT', 'SIGSYS', 'SIGTERM', 'SIGTRAP', 'SIGUSR2', 'SIGVTALRM', 'SIGXCPU']);
	const [a] = p.serveAll();
	p.edges.signal('SIGALRM');
	t.like(p.lines.at(-1), {level: 'warn', signal: 'SIGALRM', msg: 'SIGALRM ignored: graceful-cluster drains on SIGTERM, SIGINT or SIGQUIT and reloads on SIGHUP or SIGUSR2'});
	t.deepEqual(a!.received, []);
	p.edges.signal('SIGUSR2');
	t.truthy(p.line('reload started'));
	p.edges.signal('SIGQUIT');
	t.like(p.line('drain started'), {signal: 'SIGQUIT'});
});

// Reload

test('reload: one slot at a time, the new worker listening before the old one retires', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGHUP');
	const c = p.cluster.workers[2]!;
	t.is(c.env['GRACEFUL_CLUSTER_RETRY_AFTER'], '1', 'workers get their settings in the environment');
	t.deepEqual(a!.received, [], 'the old worker stays until its replacement listens');
	t.is(p.cluster.workers.length, 3, 'one candidate at a time');
	c.attach().listen();
	await flush();
	t.deepEqual(a!.received, [{v: 1, type: 'retire', lingerMs: RETIRE_LINGER_MS, signal: 'SIGHUP'}], 'the signal too: the app\'s own listeners for it run as it leaves');
	t.like(p.line('reload started'), {signal: 'SIGHUP'});
	t.deepEqual(b!.received, []);
	const d = p.cluster.workers[3]!;
	d.listen();
	await flush();
	t.deepEqual(b!.types, ['retire']);
	t.like(p.line('reload finished'), {replaced: 2});
	t.deepEqual(p.lines.filter(line => line.msg === 'worker started').map(line => line['workerRole'] ?? 'member'), ['member', 'member', 'candidate', 'candidate']);
	a!.drained().exit(0);
	b!.drained().exit(0);
	p.clock.advance(10_000);
	t.is(p.cluster.workers.length, 4, 'retired workers are not restarted');
	t.like(p.lines.find(line => line.msg === 'worker exited' && line['worker'] === a!.id), {workerRole: 'retiring', state: 'drained', level: 'info'});
	// The new workers are members now: a crash is restarted.
	c.exit(1);
	p.clock.advance(100);
	t.is(p.cluster.workers.length, 5);
});

test('reload: a replacement that fails to start ends it; the old workers keep serving', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGHUP');
	p.cluster.workers[2]!.exit(1);
	await flush();
	t.truthy(p.line('reload failed: a new worker did not start or was not ready in time; the old workers keep serving'));
	t.deepEqual([...a!.received, ...b!.received], []);
	t.is(p.cluster.workers.length, 3, 'a failed candidate is not restarted');
	p.edges.signal('SIGHUP');
	t.is(p.cluster.workers.length, 4, 'the cluster runs again: a new SIGHUP reloads');
});

test('reload: a warming replacement takes over only once ready and listening on every address the old one did', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	a!.listen(9090);
	p.edges.signal('SIGHUP');
	const c = p.cluster.workers[1]!;
	t.is(c.env['GRACEFUL_CLUSTER_REPLACEMENT'], 'on', 'the replacement knows it warms up');
	t.is(a!.env['GRACEFUL_CLUSTER_REPLACEMENT'], undefined);
	c.say({type: 'attached', warming: true}).listen().listen(9090);
	await flush();
	t.deepEqual(a!.received, [], 'listening is not enough: its readiness checks have not passed');
	c.say({type: 'not-ready', failures: ['db: Error: ECONNREFUSED']});
	p.clock.advance(5000);
	await flush();
	t.deepEqual(a!.received, []);
	const status = (): unknown[] => (clusterStatus(p.primary.view, () => 0) as {workers: Array<{warmup: unknown}>}).workers.map(worker => worker.warmup);
	t.deepEqual(status(), [null, {state: 'warming', failingChecks: ['db: Error: ECONNREFUSED']}], '/status shows the warm-up');
	c.say({type: 'ready'});
	await flush();
	t.deepEqual(a!.types, ['retire']);
	t.deepEqual(status(), [null, {state: 'ready'}]);
	t.like(p.line('worker replaced'), {worker: c.id, replaced: a!.id, warmedUp: true, readyAfterMs: 5000});
	t.like(p.line('reload finished'), {signal: 'SIGHUP', replaced: 1, kept: 0});
});

test('reload: a replacement ready but not listening on every old address waits for it', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	a!.listen(9090);
	p.edges.signal('SIGHUP');
	const c = p.cluster.workers[1]!;
	c.say({type: 'attached', warming: true}).say({type: 'ready'}).listen();
	await flush();
	t.deepEqual(a!.received, [], 'the admin port is not listening yet');
	c.listen(9090);
	await flush();
	t.deepEqual(a!.types, ['retire']);
});

test('reload: a replacement not ready within --listen-timeout is stopped, named with its failing checks; the old worker keeps serving', async t => {
	const p = primary({workers: 1, listenTimeoutMs: 10_000});
	const [a] = p.serveAll();
	p.edges.signal('SIGUSR2');
	const c = p.cluster.workers[1]!;
	c.say({type: 'attached', warming: true}).listen().say({type: 'not-ready', failures: ['warm: Error: cache not loaded']});
	p.clock.advance(9999);
	await flush();
	t.deepEqual(c.types, []);
	p.clock.advance(1);
	await flush();
	// Retired, not killed: a SIGKILL could lose a connection the primary is handing it.
	t.deepEqual(c.types, ['retire']);
	t.deepEqual(c.signals, []);
	t.like(p.line('new worker not ready in time; stopping it'), {worker: c.id, failingChecks: ['warm: Error: cache not loaded']});
	t.like(p.line('reload failed: a new worker did not start or was not ready in time; the old workers keep serving'), {
		signal: 'SIGUSR2', slot: 0, replaced: 0, kept: 1, failingChecks: ['warm: Error: cache not loaded'],
	});
	t.deepEqual(a!.received, [], 'the old worker was never told to retire');
	c.drained().exit(0);
	await flush();
	t.like(p.lines.find(line => line.msg === 'worker exited' && line['worker'] === c.id), {reason: 'start-failed', level: 'info'});
	t.is(p.cluster.live.length, 1, 'a failed replacement is not restarted');
	p.clock.advance(60_000);
	t.is(p.cluster.live.length, 1);
});

test('reload: the old worker crashes while its replacement warms up and nothing else serves: the replacement is told to take connections now', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGHUP');
	const c = p.cluster.workers[1]!;
	c.say({type: 'attached', warming: true}).listen();
	await flush();
	t.deepEqual(c.types, []);
	a!.exit(1);
	await flush();
	t.deepEqual(c.types, ['serve-now']);
	t.truthy(p.line('no worker serves while the new one warms up; it takes connections now'));
	t.is(p.cluster.workers.length, 2, 'the replacement takes the slot: no restart');
	c.say({type: 'ready'});
	await flush();
	t.like(p.line('reload finished'), {replaced: 1});
});

test('reload: an old worker whose heartbeat goes silent (blocked, stopped) while its replacement warms up: the replacement is told to take connections', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	a!.beat();
	p.edges.signal('SIGHUP');
	const c = p.cluster.workers[1]!;
	c.say({type: 'attached', warming: true}).listen();
	await flush();
	p.clock.advance(1500);
	t.deepEqual(c.types, [], 'still beating recently: it serves');
	p.clock.advance(1000);
	t.deepEqual(c.types, ['serve-now'], 'silent for 2 s: it no longer counts as serving');
});

test('reload: SIGTERM during a warm-up ends the wait at once: abandoned when the drain starts, not when the warm-up would have ended', async t => {
	const p = primary({workers: 1});
	p.serveAll();
	p.edges.signal('SIGHUP');
	p.cluster.workers[1]!.say({type: 'attached', warming: true}).listen();
	await flush();
	p.edges.signal('SIGTERM');
	await flush();
	t.truthy(p.line('reload abandoned: the cluster is shutting down'));
});

test('reload: a worker without the warm-up (no attach(), an older helper) replaces on listening, as before', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGHUP');
	p.cluster.workers[1]!.attach().listen();
	await flush();
	t.deepEqual(a!.types, ['retire']);
});

test('reload: an old worker without attach() lingers like an attached one before it is disconnected (at once, its idle keep-alive connections were reset)', async t => {
	const p = primary({workers: 1});
	const a = p.cluster.workers[0]!.listen();
	p.edges.signal('SIGHUP');
	p.cluster.workers[1]!.listen();
	await flush();
	t.deepEqual(a.types, ['retire']);
	t.is(a.disconnectCalls, 0, 'not at once');
	p.clock.advance(RETIRE_LINGER_MS - 1);
	t.is(a.disconnectCalls, 0);
	p.clock.advance(1);
	t.is(a.disconnectCalls, 1, 'after the linger');
});

test('reload: a member still starting when the signal came is replaced too, once it listens (it may run the old release)', async t => {
	const p = primary({workers: 2});
	const [a, b] = p.serveAll();
	b!.exit(1);
	p.clock.advance(100);
	const restarted = p.cluster.workers[2]!;
	t.is(p.cluster.live.length, 2, 'the crashed member is restarting');
	p.edges.signal('SIGHUP');
	t.like(p.line('reload started'), {workers: 2});
	const c = p.cluster.workers[3]!;
	c.attach().listen();
	await flush();
	t.deepEqual(a!.types, ['retire']);
	t.is(p.cluster.workers.length, 4, 'no replacement for the starting one before it listens');
	restarted.attach().listen();
	await flush();
	const d = p.cluster.workers[4]!;
	t.is(d.env['GRACEFUL_CLUSTER_REPLACEMENT'], 'on');
	d.attach().listen();
	await flush();
	t.deepEqual(restarted.types, ['retire']);
	t.like(p.line('reload finished'), {replaced: 2});
});

test('reload: SIGHUP while reloading or draining is ignored', async t => {
	const p = primary();
	p.serveAll();
	p.edges.signal('SIGHUP');
	p.edges.signal('SIGHUP');
	t.truthy(p.lines.find(line => line.msg === 'SIGHUP ignored: a reload is already running'));
	t.is(p.cluster.workers.length, 3);
	p.edges.signal('SIGTERM');
	p.edges.signal('SIGHUP');
	t.truthy(p.lines.find(line => line.msg === 'SIGHUP ignored: the cluster is shutting down'));
});

test('reload: SIGTERM aborts it; the drain takes every worker, old and the candidate', async t => {
	const p = primary();
	p.serveAll();
	p.edges.signal('SIGHUP');
	const candidate = p.cluster.workers[2]!;
	p.edges.signal('SIGTERM');
	for (const worker of p.cluster.workers) {
		t.deepEqual(worker.types, ['drain'], `worker ${worker.id}`);
	}

	candidate.attach().listen();
	await flush();
	t.truthy(p.line('reload abandoned: the cluster is shutting down'));
	t.is(p.cluster.workers.length, 3, 'no further candidate');
	for (const worker of p.cluster.live) {
		worker.drained().exit(0);
	}

	t.is(await p.done, ExitCode.OK);
});

test('reload: a retired worker still there at the deadline is killed', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGHUP');
	p.cluster.workers[1]!.listen();
	await flush();
	p.clock.advance(TIMELINE.gracePeriodMs);
	t.deepEqual(a!.signals, ['SIGKILL']);
	t.truthy(p.line('retiring worker still running at the deadline; killing it'));
});

// Restart policy

test('restarts: a crashed worker is replaced after a delay that doubles per crash, capped, per slot', t => {
	const p = primary({workers: 1});
	p.serveAll();
	const delays: unknown[] = [];
	for (let crash = 0; crash < 5; crash++) {
		const worker = p.cluster.live[0]!;
		worker.exit(1);
		const restart = p.lines.filter(line => line.msg === 'restarting worker').at(-1)!;
		delays.push(restart['delayMs']);
		p.clock.advance(Number(restart['delayMs']) - 1);
		t.is(p.cluster.live.length, 0, 'not before the delay');
		p.clock.advance(1);
		p.cluster.live[0]!.listen();
	}

	t.deepEqual(delays, [100, 200, 400, 800, 1000]);
});

test('restarts: a worker that stayed up --backoff-reset starts the delay over', t => {
	const p = primary({workers: 1});
	p.serveAll();
	p.cluster.live[0]!.exit(1);
	p.clock.advance(100);
	p.cluster.live[0]!.listen();
	p.clock.advance(30_000);
	p.cluster.live[0]!.exit(1);
	t.is(p.lines.filter(line => line.msg === 'restarting worker').at(-1)!['delayMs'], 100);
});

test('restarts: failed starts in a row with nothing serving -> give up, exit 6 with the app\'s stderr', async t => {
	const p = primary({workers: 1, maxStartFailures: 3});
	for (let start = 0; start < 3; start++) {
		p.cluster.live[0]!.exit(1);
		p.clock.advance(1000);
	}

	t.is(await p.done, ExitCode.START_FAILED);
	t.is(p.cluster.workers.length, 3);
	t.like(p.lines.find(line => line.level === 'fatal'), {failures: 3, code: 1});
});

test('restarts: a worker that does not listen within --listen-timeout is killed as a failed start', async t => {
	const p = primary({workers: 1, maxStartFailures: 1});
	const [a] = p.cluster.workers;
	p.clock.advance(9999);
	t.deepEqual(a!.signals, []);
	p.clock.advance(1);
	t.deepEqual(a!.signals, ['SIGKILL']);
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.START_FAILED);
	t.like(p.lines.find(line => line.level === 'fatal'), {killedFor: 'listen-timeout'});
});

test('restarts: with another worker serving, failed starts never give up', t => {
	const p = primary({maxStartFailures: 2});
	const [a, b] = p.serveAll();
	a!.exit(1);
	for (let attempt = 0; attempt < 5; attempt++) {
		p.clock.advance(1000);
		p.cluster.live.find(worker => worker !== b)!.exit(1);
	}

	t.falsy(p.lines.find(line => line.level === 'fatal'));
	t.is(p.code(), undefined);
});

test('drain: a worker without the helper killed at the deadline: responsesCut is null (not known), not 0', async t => {
	const p = primary({workers: 2});
	const [a, b] = p.cluster.workers;
	a!.listen();
	b!.attach().listen();
	p.edges.signal('SIGTERM');
	b!.drained().exit(0);
	p.clock.advance(TIMELINE.gracePeriodMs);
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.DEADLINE);
	t.like(p.line('drain finished'), {workersLost: 1, responsesCut: null, lost: [{worker: a!.id, inflight: null, killedFor: 'deadline'}]});
});

// Worker a leaves by itself, exit 0: listening with nothing drained, its own
// exit may have cut requests nobody counted; still starting, it held none.
for (const {a: place, responsesCut, outcome} of [{a: 'listening with nothing drained', responsesCut: null, outcome: 'uncounted'}, {a: 'still starting', responsesCut: 0, outcome: 'clean'}] as const) {
	test(`drain: drained workers and one ${place} that leaves by itself: ${outcome}, responsesCut ${String(responsesCut)}`, async t => {
		const p = primary({workers: 2});
		const [a, b] = p.cluster.workers;
		if (place !== 'still starting') {
			a!.listen(4000);
		}

		b!.attach().listen();
		p.edges.signal('SIGTERM');
		b!.drained(3).exit(0);
		a!.exit(0);
		t.is(await p.done, ExitCode.OK);
		t.like(p.line('drain finished'), {outcome, exitCode: 0, workersLost: 0, responsesCut, served: 3, uncounted: place === 'still starting' ? [] : ['127.0.0.1:4000']});
	});
}

test('drain: a drained server and one nothing counts in the same worker (a raw protocol, one left out): uncounted, exit 0, the counted figures kept', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	a!.attach().listen(3000);
	// Its second server: no drained server covers it.
	a!.emit('listening', {address: '127.0.0.1', port: 6379, addressType: 4});
	p.edges.signal('SIGTERM');
	a!.drained(5).exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'uncounted', exitCode: 0, served: 5, responsesCut: null, uncounted: ['127.0.0.1:6379']});
});

test('drain: a worker whose only drained server the app let go of (exclude() after listen) counted nothing: its figures are unknown (null)', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	a!.attach().listen(3000).say({type: 'covers', address: '3000', drained: false});
	p.edges.signal('SIGTERM');
	a!.drained(0).exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'uncounted', served: null, rejected: null, responsesCut: null, uncounted: ['127.0.0.1:3000']});
	t.regex(String(p.line('drain finished')?.['advice']), /^no arrival figures/);
});

test('a server that binds its port without node:cluster (listening-apart) counts as listening: the worker is started, its address is the worker\'s', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	a!.attach().say({type: 'covers', address: '9000'}).say({type: 'listening-apart', address: '0.0.0.0:9000'});
	t.like(p.line('worker listening'), {address: '0.0.0.0:9000'});
	p.edges.signal('SIGTERM');
	a!.drained(2).exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', served: 2, uncounted: []});
});

test('drain: no worker had a server to drain, but they listened: served, aborted, rejected and responsesCut are unknown (null), not 0', async t => {
	const p = primary({workers: 2});
	const [a, b] = p.cluster.workers;
	a!.listen(7000);
	b!.listen(7000);
	p.edges.signal('SIGTERM');
	p.clock.advance(TIMELINE.servePeriodMs + TIMELINE.rejectPeriodMs);
	a!.exit(0);
	b!.exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'uncounted', exitCode: 0, served: null, aborted: null, rejected: null, responsesCut: null, uncounted: ['127.0.0.1:7000']});
});

test('drain: queue consumers that leave at once end the drain before its reject phase would have: no reject end is reported, the figures are 0 (no HTTP served), not unknown', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	p.edges.signal('SIGTERM');
	p.clock.advance(500);
	a!.exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', durationMs: 500, served: 0, rejectEnd: null, rejectEndedMs: null, uncounted: []});
});

test('drain: workers that never listen (queue consumers) have nothing uncounted: clean', async t => {
	const p = primary({workers: 1});
	const [a] = p.cluster.workers;
	p.edges.signal('SIGTERM');
	p.clock.advance(TIMELINE.servePeriodMs + TIMELINE.rejectPeriodMs);
	a!.exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', served: 0, responsesCut: 0, uncounted: []});
});

test('drain progress tells a worker with nothing to drain from one that has not reported', t => {
	const p = primary({workers: 3});
	const [a, b, c] = p.cluster.workers;
	a!.listen();
	b!.attach().listen();
	c!.attach().listen().say({type: 'inflight', inflight: 4, served: 0, rejected: 0, upgrades: 0, streams: 0});
	p.edges.signal('SIGTERM');
	p.clock.advance(1000);
	t.like(p.line('drain progress'), {inflight: 4, workers: {[a!.id]: 'nothing drained', [b!.id]: 'no report', [c!.id]: 4}});
});

test('reload then drain: a worker still retiring is the drain\'s: killed at the drain\'s deadline (exit 3), not at its own', async t => {
	const p = primary({workers: 1, settings: {...DEFAULT_SETTINGS, servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 5000}});
	const [old] = p.serveAll();
	old!.say({type: 'inflight', inflight: 1, served: 0, rejected: 0, upgrades: 0, streams: 0});
	p.edges.signal('SIGHUP');
	p.cluster.workers[1]!.attach().listen();
	await flush();
	t.deepEqual(old!.types, ['retire']);
	p.clock.advance(1500);
	p.edges.signal('SIGTERM');
	p.cluster.workers[1]!.drained().exit(0);
	// The retire deadline (5 s after the reload) would come first; the drain's decides.
	p.clock.advance(3600);
	t.deepEqual(old!.signals, [], 'not killed at the retire deadline');
	p.clock.advance(1400);
	t.deepEqual(old!.signals, ['SIGKILL']);
	old!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.DEADLINE);
	t.like(p.line('drain finished'), {exitCode: 3, lost: [{worker: old!.id, killedFor: 'deadline'}]});
});

test('reload then drain: a retiring worker\'s server that nothing counts is still named in uncounted', async t => {
	const p = primary({workers: 1, settings: {...DEFAULT_SETTINGS, servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 5000}});
	const [old] = p.serveAll();
	// A second server of the app's, not drained (a raw protocol).
	old!.emit('listening', {address: '127.0.0.1', port: 6379, addressType: 4});
	p.edges.signal('SIGHUP');
	p.cluster.workers[1]!.attach().listen();
	await flush();
	p.edges.signal('SIGTERM');
	p.cluster.workers[1]!.drained().exit(0);
	old!.drained().exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'uncounted', exitCode: 0, responsesCut: null, uncounted: ['127.0.0.1:6379']});
});

test('gone waits for both the exit and the channel, in either order', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.closeChannel();
	t.is(p.code(), undefined, 'the channel closed first: still waiting for the exit');
	a!.emit('exit', 0, null);
	t.is(await p.done, ExitCode.WORKER_LOST, 'it never said it drained');
});

test('a worker that never listened is not a lost one: a group SIGTERM during start-up exits 0', async t => {
	const p = primary();
	p.edges.signal('SIGTERM');
	for (const worker of p.cluster.workers) {
		worker.exit(null, 'SIGTERM');
	}

	t.is(await p.done, ExitCode.OK);
});

test('drain progress: a line when the counts change, otherwise one every 5 s (an idle reject phase is quiet)', t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 2, served: 0, rejected: 0, upgrades: 0, streams: 0});
	p.clock.advance(3000);
	const progress = () => p.lines.filter(line => line.msg === 'drain progress').map(line => line['inflight']);
	t.deepEqual(progress(), [2], 'unchanged counts: one line in 3 s');
	a!.say({type: 'inflight', inflight: 1, served: 1, rejected: 0, upgrades: 0, streams: 0});
	p.clock.advance(1000);
	t.deepEqual(progress(), [2, 1], 'a change is logged at the next tick');
	p.clock.advance(5000);
	t.deepEqual(progress(), [2, 1, 1], 'and repeated after 5 s');
});

test('drain finished reports long-lived connections closed and workers lost or hung', async t => {
	const p = primary({workers: 2});
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	// The long-lived connection counts (upgrades, streams) come with the in-flight reports.
	a!.say({type: 'inflight', inflight: 0, served: 0, rejected: 0, upgrades: 3, streams: 1});
	p.clock.advance(6000);
	// The worker closed them at the end of the reject phase and says so as it leaves.
	a!.say({type: 'drained', served: 0, rejected: 0, durationMs: 1, closedLongLived: 4}).exit(0);
	b!.exit(1);
	t.is(await p.done, ExitCode.WORKER_LOST);
	t.like(p.line('drain finished'), {closedLongLived: 4, workersLost: 1, workersHung: 0});
});

test('exitReason: a retired worker that crashes is a crash, one killed at the deadline a deadline; a planned retire keeps its reason', t => {
	const retiring = {name: 'retiring', attached: true, reason: 'reload', addresses: []} as const;
	const gone = (last: object, code: number | null = 0, signal: string | null = null) => ({name: 'gone', code, signal, last}) as Parameters<typeof exitReason>[0];
	t.is(exitReason(gone(retiring, 1)), 'crash');
	t.is(exitReason(gone({name: 'killed', reason: 'deadline', before: retiring}, null, 'SIGKILL')), 'deadline');
	t.is(exitReason(gone({name: 'drained', summary: {served: 0, rejected: 0, durationMs: 1}, from: retiring})), 'reload');
	t.is(exitReason(gone({...retiring, attached: false})), 'reload', 'without the helper: exit 0 once its connections end');
	t.is(exitReason(gone({name: 'listening', role: 'member', attached: true, addresses: []}, 7)), 'crash');
	t.is(exitReason(gone({name: 'killed', reason: 'hung', before: {name: 'listening', role: 'member', attached: true, addresses: []}}, null, 'SIGKILL')), 'hung');
	t.is(exitReason(gone({name: 'killed', reason: 'listen-timeout', before: {name: 'starting', role: 'member', attached: false}}, null, 'SIGKILL')), 'start-failed');
});

test('exitReason in the cluster\'s drain: a worker without the helper that exits 0 (its basic drain), and one still loading ended by a group signal, are drained; a throw or a SIGSEGV while loading is a crash', t => {
	const gone = (last: object, code: number | null = 0, signal: string | null = null) => ({name: 'gone', code, signal, last}) as Parameters<typeof exitReason>[0];
	const bare = {name: 'listening', role: 'member', attached: false, addresses: []} as const;
	const loading = {name: 'starting', role: 'candidate', attached: false} as const;
	t.is(exitReason(gone(bare), {draining: true}), 'drain');
	t.is(exitReason(gone(bare)), 'crash', 'the same exit while running is the app ending by itself');
	t.is(exitReason(gone(bare, 1), {draining: true}), 'crash');
	t.is(exitReason(gone({...bare, attached: true}), {draining: true}), 'crash', 'with the helper, a drained worker says so first');
	t.is(exitReason(gone(loading, null, 'SIGINT'), {draining: true}), 'drain', 'a group signal before the bootstrap\'s handlers: it held no request');
	t.is(exitReason(gone(loading), {draining: true}), 'drain');
	t.is(exitReason(gone(loading, 1), {draining: true}), 'crash', 'a throw while loading is a crash, drain or not');
	t.is(exitReason(gone({...loading, attached: true}, 3), {draining: true}), 'crash');
	t.is(exitReason(gone(loading, null, 'SIGSEGV'), {draining: true}), 'crash');
	t.is(exitReason(gone({name: 'killed', reason: 'deadline', before: loading}, null, 'SIGKILL'), {draining: true}), 'deadline');
});

test('drain: a worker killed before it ever reported (its loop blocked before it read the drain): responsesCut counts its last heartbeat\'s requests', async t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	a!.beat({inflight: 2});
	p.edges.signal('SIGTERM');
	p.clock.advance(TIMELINE.gracePeriodMs);
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.DEADLINE);
	t.like(p.line('drain finished'), {responsesCut: 2, lost: [{worker: a!.id, inflight: 2, killedFor: 'deadline'}]});
	t.like(p.line('killing worker'), {inflight: 2});
});

test('drain: responses that closed without completing are summed apart from the served ones; a helper that predates the count reads 0', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 1, served: 2, aborted: 1, rejected: 0, upgrades: 0, streams: 0});
	// A hook of a's ends the worker itself: its last counts stay.
	a!.say({type: 'hooks', served: 3, aborted: 2, rejected: 0}).exit(0);
	// b's helper is older: no `aborted` in its messages.
	b!.say({type: 'inflight', inflight: 1, served: 0, rejected: 0, upgrades: 0, streams: 0}).drained(4).exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', served: 7, aborted: 2});
});

test('drain: long-lived connections the workers closed, and those they had to destroy, are summed from their last reports', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 0, served: 1, rejected: 0, upgrades: 0, streams: 0, closedLongLived: 3, longLivedCut: 1});
	// A hook of a's ends the worker itself: no drained message, the counts stay.
	a!.say({type: 'hooks', served: 1, rejected: 0, closedLongLived: 3, longLivedCut: 1}).exit(0);
	b!.drained().exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {closedLongLived: 3, longLivedCut: 1, served: 1});
});

test('reload then drain: what the retired workers counted for the reload stays out of drain finished, their failed hooks too; each adds only what it did after the signal', async t => {
	const p = primary({workers: 4, settings: {...DEFAULT_SETTINGS, servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 5000}});
	const [inHooks, done, exact, older] = p.serveAll();
	p.edges.signal('SIGHUP');
	for (let index = 4; index < 8; index++) {
		p.cluster.workers[index]!.attach().listen();
		await flush();
	}

	t.like(p.line('reload finished'), {replaced: 4});
	// Before the signal: one in its hooks, one of which failed; one drained, not exited yet;
	// two still serving their last requests, their last reports read.
	inHooks!.say({type: 'hook-failed', hook: 'pool.end'}).say({type: 'hooks', served: 4, rejected: 0});
	done!.say({type: 'drained', served: 5, rejected: 0, durationMs: 1000, closedLongLived: 2});
	exact!.say({type: 'inflight', inflight: 1, served: 3, rejected: 0, upgrades: 0, streams: 0});
	older!.say({type: 'inflight', inflight: 1, served: 3, rejected: 0, redirected: 1, upgrades: 1, streams: 0, closedLongLived: 1});
	p.edges.signal('SIGTERM');
	t.like(p.line('drain started'), {workers: 8});
	// Its hook ends the process: no drained message.
	inHooks!.exit(0);
	done!.exit(0);
	// One more response finished before it read the signal: its own figures of that moment count from there.
	exact!.say({type: 'inflight', inflight: 1, served: 4, rejected: 0, upgrades: 0, streams: 0, atSignal: true});
	exact!.drained(6).exit(0);
	// An older helper tells nothing at the signal: the primary's last copy is the start.
	older!.say({type: 'drained', served: 6, rejected: 0, redirected: 3, durationMs: 1000, closedLongLived: 1, longLivedCut: 1}).exit(0);
	p.cluster.workers[4]!.drained(1).exit(0);
	for (const worker of p.cluster.workers.slice(5, 8)) {
		worker.drained(0).exit(0);
	}

	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {outcome: 'clean', served: 2 + 3 + 1, redirected: 3 - 1, hooksFailed: 0, closedLongLived: 1, longLivedCut: 1});
});

test('reload then drain: a retiree\'s hook that failed just before it read the signal (the failure still on its way to the primary) is the reload\'s; one that fails after is the drain\'s', async t => {
	const p = primary({workers: 2, settings: {...DEFAULT_SETTINGS, servePeriodMs: 0, rejectPeriodMs: 1000, gracePeriodMs: 5000}});
	const [crossed, after] = p.serveAll();
	p.edges.signal('SIGHUP');
	for (const index of [2, 3]) {
		p.cluster.workers[index]!.attach().listen();
		await flush();
	}

	p.edges.signal('SIGTERM');
	// Failed before it read the drain message: its report of that moment says so.
	crossed!.say({type: 'hook-failed', hook: 'pool.end'});
	crossed!.say({type: 'inflight', inflight: 0, served: 1, rejected: 0, upgrades: 0, streams: 0, atSignal: true, hooksFailed: 1});
	crossed!.drained(1).exit(0);
	after!.say({type: 'inflight', inflight: 1, served: 0, rejected: 0, upgrades: 0, streams: 0, atSignal: true, hooksFailed: 0});
	after!.say({type: 'hook-failed', hook: 'cache.quit'});
	after!.drained(1).exit(0);
	p.cluster.workers[2]!.drained(0).exit(0);
	p.cluster.workers[3]!.drained(0).exit(0);
	t.is(await p.done, ExitCode.HOOK_FAILED);
	t.like(p.line('drain finished'), {hooksFailed: 1, served: 1, outcome: 'hooks-failed'});
});

test('drain: the arrivals a worker had counted when its hooks began reach drain finished, though a hook ends the process before any later report', async t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	const arrivals = (total: number) => ({total, bySecond: [total], lastMs: 900, lastFrom: '10.0.0.7', peers: [{peer: '10.0.0.7', ratePerSecond: 10, count: total, lastMs: 900}]});
	a!.say({type: 'inflight', inflight: 0, served: 0, rejected: 2, upgrades: 0, streams: 0, arrivals: arrivals(2)});
	// Two more 503s before the hooks: the hook exits the process, no report comes after.
	a!.say({type: 'hooks', served: 0, rejected: 4, arrivals: arrivals(4)}).exit(0);
	b!.drained().exit(0);
	t.is(await p.done, ExitCode.OK);
	t.like(p.line('drain finished'), {rejected: 4, arrivals: 4});
});

test('adaptive reject: a worker whose last heartbeat read its loop 450 ms late may still hold unread requests (a sampled stall reads up to 100 ms short): the phase waits for a beat at rest', async t => {
	const p = primary({adaptiveReject: true, workers: 1});
	const [a] = p.serveAll();
	p.edges.signal('SIGTERM');
	a!.say({type: 'inflight', inflight: 0, served: 0, rejected: 0, upgrades: 0, streams: 0, arrivals: {total: 0, bySecond: [], lastMs: null, lastFrom: null, peers: []}});
	const beatFor = (ms: number, loopDelayMs: number): void => {
		for (let at = 0; at < ms; at += 250) {
			a!.beat({loopDelayMs});
			p.clock.advance(250);
		}
	};

	beatFor(3500, 450);
	t.false(a!.types.includes('end-reject'), 'past the 3 s floor, still waiting');
	beatFor(500, 0);
	t.true(a!.types.includes('end-reject'), 'ended once the loop is at rest');
	t.like(p.line('reject phase ended early: the load balancers have stopped sending'), {afterMs: 3750});
});

test('adaptive reject: the end waits for every worker\'s answer to report-now; one that does not answer, or answers with an arrival its reports had not shown, keeps the phase; once ended, /status says closing at once', async t => {
	const p = primary({adaptiveReject: true, workers: 2, settings: {...DEFAULT_SETTINGS, servePeriodMs: 0, rejectPeriodMs: 20_000, gracePeriodMs: 30_000}});
	const [a, b] = p.serveAll();
	p.edges.signal('SIGTERM');
	const peer = {peer: '10.0.0.1', ratePerSecond: 50, count: 1, lastMs: 100};
	const report = {type: 'inflight', inflight: 0, served: 0, rejected: 1, upgrades: 0, streams: 0} as const;
	a!.say({...report, arrivals: {total: 1, bySecond: [1], lastMs: 100, lastFrom: '10.0.0.1', peers: [peer]}});
	b!.say({...report, arrivals: {total: 0, bySecond: [], lastMs: null, lastFrom: null, peers: []}});
	b!.answersReportNow = false;
	const beat = (ms: number): void => {
		for (let at = 0; at < ms; at += 250) {
			a!.beat();
			b!.beat();
			p.clock.advance(250);
		}
	};

	beat(3000);
	t.true(a!.types.includes('report-now'), 'the rule would end: it asks for fresh figures');
	t.false(a!.types.includes('end-reject'), 'worker b has not answered');
	// b answers the next one, with an arrival at 3.1 s its reports had not shown.
	b!.answersReportNow = {...report, arrivals: {total: 1, bySecond: [0, 0, 0, 1], lastMs: 3100, lastFrom: '10.0.0.1', peers: [{...peer, lastMs: 3100}]}};
	beat(1000);
	t.false(a!.types.includes('end-reject'), 'the fresh arrival keeps the phase open');
	t.is((clusterStatus(p.primary.view, () => 0) as {phase: string}).phase, 'reject');
	b!.answersReportNow = true;
	beat(2000);
	t.true(a!.types.includes('end-reject'));
	const ended = p.line('reject phase ended early: the load balancers have stopped sending')!;
	t.true(Number(ended['afterMs']) >= 4100, 'a second after the fresh arrival at least');
	const status = clusterStatus(p.primary.view, () => 0) as {phase: string; drain: {rejectUntil: string; rejectEnd: string}};
	t.is(status.phase, 'closing', 'at once, not when the period would have ended');
	t.is(status.drain.rejectEnd, 'adaptive');
	t.true(Date.parse(status.drain.rejectUntil) <= Date.now(), `rejectUntil ${status.drain.rejectUntil}`);
});

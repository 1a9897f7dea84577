// A rolling update through a real load balancer (issue 4): HAProxy with active
// health checks on /readyz in front of two graceful-cluster pods, steady
// keep-alive load, SIGTERM to pod 1's primary, a replacement on the same port.
// The harness (testkit/rollout.ts) is shared with bench/rollout.js. Beside the
// HTTP load, WebSocket clients that reconnect whenever the server closes them:
// the app closes pod 1's in onDrain, and none may see 1006 or a failed reconnect.
import test from 'ava';
import {Cleanup, describe, HEALTH_CHECK, haproxyBinary, runRollout, SCENARIOS, type RunResult, type Scenario, type Variant} from '../../testkit/rollout.js';
import {CLI, fixture, ROOT} from '../helpers/cluster.js';

const REJECT_PERIOD = '4s';
// Longer than the detection time (at most fall x inter plus a check's latency).
const SERVE_PERIOD = '4s';
const GRACE_PERIOD = '15s';

const gracefulCluster: Variant = {
	name: 'graceful-cluster',
	pod: ({port, scenario}) => ({
		argv: [
			process.execPath, CLI, '--workers', '2',
			'--serve-period', scenario.serve ? SERVE_PERIOD : '0s',
			'--reject-period', REJECT_PERIOD,
			'--grace-period', GRACE_PERIOD,
			fixture('app.mjs'),
		],
		// A ws echo server on /ws that closes its sockets in onDrain (1001).
		env: {PORT: String(port), FIXTURE_WEBSOCKETS: '1'},
		cwd: ROOT,
	}),
};

const scenario = (id: number): Scenario => SCENARIOS.find(s => s.id === id)!;
/** WebSocket clients through HAProxy beside the HTTP load, reconnecting whenever the server closes them. */
const WEB_SOCKETS = 20;

async function rollout(t: import('ava').ExecutionContext, id: number): Promise<RunResult> {
	t.timeout(120_000);
	const cleanup = new Cleanup();
	t.teardown(async () => cleanup.run());
	const result = await runRollout({variant: gracefulCluster, scenario: scenario(id), webSockets: WEB_SOCKETS, log: message => t.log(message)}, cleanup);
	t.log(describe(result));
	// The outcomes every configuration must have.
	t.true(result.requests > 300, `the load ran (${result.requests} requests)`);
	t.is(result.ambiguousTotal, 0, `no ambiguous failure:\n${describe(result)}`);
	t.is(result.inflight.completed, result.inflight.sent, `every in-flight request completed: ${result.inflight.outcomes.join(', ')}`);
	t.is(result.inflight.rerun, 0, 'each in-flight request ran once, on pod 1');
	t.false(result.exit.killed, 'pod 1 exited on its own');
	t.is(result.exit.code, 0, 'pod 1 drained cleanly');
	t.not(result.detectionMs, undefined, 'HAProxy marked pod 1 DOWN');
	t.not(result.replacement.upMs, undefined, 'HAProxy saw the replacement UP');
	t.true(result.replacement.served >= 200, `the replacement served a while (${result.replacement.served} requests)`);
	// WebSockets: the app closes pod 1's in onDrain; each client reconnects to a live pod.
	const ws = result.webSockets!;
	t.is(ws.abnormal, 0, `no WebSocket cut without a close frame (1006): ${JSON.stringify(ws.closes)}`);
	t.is(ws.failedConnects, 0, `no failed reconnect: ${ws.failures.join(', ')}`);
	t.true((ws.closes['1001'] ?? 0) >= 1, `pod 1's WebSockets were closed with 1001: ${JSON.stringify(ws.closes)}`);
	t.true(ws.opened > WEB_SOCKETS, `the clients reconnected (${ws.opened} handshakes for ${WEB_SOCKETS} clients)`);
	return result;
}

test.before(() => {
	// Fails the whole file with a clear message when HAProxy is missing.
	haproxyBinary();
});

test.serial('config 1, health checks only: every failure is a 503 with Retry-After', async t => {
	const result = await rollout(t, 1);
	const span = result.rejectedSpan;
	t.log(`config 1: ${result.rejected} of ${result.requests} requests answered 503 + Retry-After${span ? `, over ${span.last - span.first} ms (${span.first}..${span.last} ms after SIGTERM)` : ''}; detection ${result.detectionMs} ms (checks every ${HEALTH_CHECK.interMs} ms, fall ${HEALTH_CHECK.fall})`);
	// The 503s can only come from pod 1 before HAProxy stopped sending it traffic.
	if (span) {
		t.true(span.last <= (result.detectionMs ?? 0) + 1000, 'no 503 long after detection');
	}
});

test.serial('config 2, health checks and a serve period longer than detection: no failure at all', async t => {
	const result = await rollout(t, 2);
	t.is(result.rejected, 0, 'no 503: HAProxy stopped sending pod 1 traffic while it still served');
	t.true((result.detectionMs ?? Number.POSITIVE_INFINITY) < 4000, `detection (${result.detectionMs} ms) within the serve period (${SERVE_PERIOD})`);
});

test.serial('config 3, health checks + retry-on 503 + redispatch: no failure at all', async t => {
	const result = await rollout(t, 3);
	t.is(result.rejected, 0, 'every drain 503 was retried on the other pod');
});

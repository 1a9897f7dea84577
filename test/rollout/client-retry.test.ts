// The client side of the claim (issue 4): an app calling two pods directly with
// got's DEFAULT retry policy (which retries a 503 after its Retry-After, and a
// refused or reset connection) and a beforeRetry hook that moves the retry to
// the other pod sees no failure while one pod drains and exits.
import http from 'node:http';
import {setTimeout as delay} from 'node:timers/promises';
import test from 'ava';
import got, {type RequestError} from 'got';
import {url} from '../../testkit/net.js';
import {eventually, waitUntil} from '../../testkit/proc.js';
import {fixture, startCluster} from '../helpers/cluster.js';

test('got with its default retry policy, retrying on the other pod, sees no failure while a pod drains and exits', async t => {
	t.timeout(90_000);
	const options = ['--reject-period', '3s', '--grace-period', '15s'];
	const [draining, staying] = await Promise.all([
		startCluster(t, options, fixture('app.mjs')),
		startCluster(t, options, fixture('app.mjs')),
	]);
	const ports = [draining.port, staying.port];

	// Keep-alive, so connections to the draining pod are open (and idle) when the signal comes.
	const agent = new http.Agent({keepAlive: true});
	t.teardown(() => {
		agent.destroy();
	});
	const retriedOn: Record<string, number> = {};
	const api = got.extend({
		agent: {http: agent},
		hooks: {
			beforeRetry: [
				(error: RequestError) => {
					const reason = error.response ? String(error.response.statusCode) : error.code;
					retriedOn[reason] = (retriedOn[reason] ?? 0) + 1;
					// The retry goes to the other pod.
					const other = new URL(error.options.url!);
					other.port = String(ports.find(port => port !== Number(other.port)));
					error.options.url = other;
				},
			],
		},
	});

	let stopped = false;
	let ok = 0;
	const failures: string[] = [];
	const clients = Array.from({length: 6}, async (_, client) => {
		for (let n = client; !stopped; n++) {
			const port = ports[n % 2]!;
			try {
				const response = await api(url(port, '/'));
				if (response.body === 'hello') {
					ok++;
				} else {
					failures.push(`unexpected body ${JSON.stringify(response.body)}`);
				}
			} catch (error) {
				failures.push(`${(error as RequestError).code}: ${(error as Error).message}`);
			}

			await delay(5);
		}
	});

	// Long requests in flight on the draining pod when the signal comes.
	const longs = [0, 1].map(async i => api(url(draining.port, `/slow?ms=3000&id=long-${i}`)));
	await draining.waitForLog('fixture request started', {count: 2});
	// Bounded waits on the load's own progress, not on the clock.
	const okAtLeast = async (n: number, what: string) => waitUntil(() => ok >= n, {timeout: 20_000, interval: 20, what: `${what}: ${n} requests succeeded`});

	await okAtLeast(200, 'warm-up');

	draining.kill('SIGTERM');
	await draining.waitForLog('rejecting new requests', {count: 2});
	const exit = await draining.exited;
	// Keep going a little after the exit: requests to the gone pod are refused, then retried.
	const okAtExit = ok;
	// Until the clients have met the gone pod (refused, retried elsewhere) and carried on.
	await okAtLeast(okAtExit + 100, 'after the exit');
	await eventually(() => (retriedOn['ECONNREFUSED'] ?? 0) > 0, {timeout: 10_000, interval: 20});

	stopped = true;
	await Promise.all(clients);
	const longResponses = await Promise.all(longs);

	t.log(`${ok} requests succeeded (${ok - okAtExit} after the pod exited), ${failures.length} failed; retries by cause: ${JSON.stringify(retriedOn)}`);
	t.deepEqual(failures, [], 'no request failed');
	t.is(exit.code, 0, draining.text());
	t.true((retriedOn['503'] ?? 0) > 0, 'the drain 503s were retried');
	t.true(ok - okAtExit >= 100, `${ok - okAtExit} requests succeeded after the pod exited`);
	t.true((retriedOn['ECONNREFUSED'] ?? 0) > 0, 'requests to the gone pod were refused and retried on the other one');
	for (const response of longResponses) {
		t.is(response.statusCode, 200);
		t.is(response.body.length, 100_000);
	}
});

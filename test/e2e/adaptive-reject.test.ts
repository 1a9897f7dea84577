// Arrival telemetry and --adaptive-reject on (issue 19) with the real CLI: two
// "load balancer nodes", each a keep-alive client bound to its own loopback
// address (127.0.0.2, 127.0.0.3), stop sending at their own delay after the
// SIGTERM, as kube-proxy on two nodes would. The drain's figures must name
// when and from where the last request came, and the adaptive rule must end
// the reject phase after the late one stopped, well before the period's end.
import http from 'node:http';
import test, {type ExecutionContext} from 'ava';
import {fixture, startCluster} from '../helpers/cluster.js';
import {RawConnection} from '../helpers/http.js';

/** A load balancer node: requests from `address` on its kept-alive connections until stopped. */
function node(port: number, address: string) {
	const agent = new http.Agent({keepAlive: true, maxSockets: 2, localAddress: address});
	const outcomes: Array<{status?: number; error?: string; at: number}> = [];
	let stopped = false;
	const one = async (): Promise<void> => new Promise(resolve => {
		const request = http.get({host: '127.0.0.1', port, path: '/pid', agent}, response => {
			response.resume();
			response.on('end', () => {
				outcomes.push({status: response.statusCode, at: Date.now()});
				resolve();
			});
		});
		request.on('error', (error: NodeJS.ErrnoException) => {
			outcomes.push({error: error.code ?? error.message, at: Date.now()});
			resolve();
		});
	});
	const loop = (async () => {
		while (!stopped) {
			await one();
			await new Promise(resolve => {
				setTimeout(resolve, 20);
			});
		}
	})();
	return {
		outcomes,
		async stop() {
			stopped = true;
			await loop;
			agent.destroy();
		},
	};
}

/** `adaptive`: the flag's value, or the default (no flag). */
async function drainWithNodes(t: ExecutionContext, adaptive: 'on' | 'off' | 'default', lateMs: number) {
	const app = await startCluster(t, ['--reject-period', '8s', '--grace-period', '20s', ...(adaptive === 'default' ? [] : ['--adaptive-reject', adaptive])], fixture('app.mjs'));
	const early = node(app.port, '127.0.0.2');
	const late = node(app.port, '127.0.0.3');
	t.teardown(async () => Promise.all([early.stop(), late.stop()]));
	// A rate before the signal for each (taken over the process's life when it is younger than 60 s),
	// and 5 s of looking: a pod that has counted less than 10 s by the end waits until it has.
	const startedAt = Date.now();
	while (early.outcomes.length < 30 || late.outcomes.length < 30 || Date.now() - startedAt < 5000) {
		await new Promise(resolve => {
			setTimeout(resolve, 50);
		});
	}

	const signalAt = Date.now();
	app.kill('SIGTERM');
	await new Promise(resolve => {
		setTimeout(resolve, 300);
	});
	await early.stop();
	await new Promise(resolve => {
		setTimeout(resolve, lateMs - 300);
	});
	await late.stop();
	const finished = await app.waitForLog('drain finished', {timeout: 20_000});
	const exit = await app.exited;
	return {app, finished, exit, signalAt, early, late};
}

test('--adaptive-reject on: the reject phase ends once the late node has been quiet for its window, not at the 8 s period; the figures name it', async t => {
	const {app, finished, exit} = await drainWithNodes(t, 'on', 2500);
	t.is(exit.code, 0, app.text());
	const ended = app.lines.find(line => line.msg === 'reject phase ended early: the load balancers have stopped sending');
	t.truthy(ended, 'the adaptive rule ended it');
	t.log(JSON.stringify({ended: ended?.['peers'], afterMs: ended?.['afterMs'], lastArrivalMs: finished['lastArrivalMs'], advice: finished['advice']}));
	t.like(finished, {rejectEnd: 'adaptive', lastArrivalFrom: '127.0.0.3'});
	const lastArrivalMs = finished['lastArrivalMs'] as number;
	const rejectEndedMs = finished['rejectEndedMs'] as number;
	t.true(lastArrivalMs >= 2000 && lastArrivalMs < 3500, `the late node's last request came at ${lastArrivalMs} ms`);
	t.true(rejectEndedMs > lastArrivalMs + 1000, `ended ${rejectEndedMs} ms after the signal: at least 1 s after the last arrival`);
	t.true(rejectEndedMs < 7000, `ended well before the 8 s period (${rejectEndedMs} ms)`);
	const bySecond = finished['arrivalsBySecond'] as number[];
	t.true(bySecond[0]! > 0 && bySecond[2]! > 0, `arrivals in the first seconds: ${JSON.stringify(bySecond)}`);
	t.is(bySecond.length, Math.ceil(rejectEndedMs / 1000));
	const peers = (ended!['peers'] as Array<{peer: string}>).map(peer => peer.peer).sort();
	t.deepEqual(peers, ['127.0.0.2', '127.0.0.3'], 'both nodes were waited for');
	// After an early end a request is refused before anything counts it: the advice does not call the last one seen the load balancer's stop.
	t.regex(String(finished['advice']), /ended early \(adaptive\) \d\.\d s after the last app request seen, 2\.\d s after the signal; requests after the end, if any, were refused unseen/);
});

test('--adaptive-reject off (the default): the full period; the figures still say when the load balancer stopped', async t => {
	const {app, finished, exit} = await drainWithNodes(t, 'default', 1000);
	t.is(exit.code, 0, app.text());
	t.falsy(app.lines.find(line => line.msg === 'reject phase ended early: the load balancers have stopped sending'));
	t.like(finished, {rejectEnd: 'period', rejectEndedMs: 8000, lastArrivalFrom: '127.0.0.3'});
	t.true((finished['lastArrivalMs'] as number) < 1500);
	t.regex(String(finished['advice']), /stopped sending 1\.\d s after the signal; the reject phase ended [67]\.\d s after that/);
});

test('an arrival after the reject phase ended (pipelined behind a slow response) is in arrivalsBySecond too: the seconds add up to arrivals', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '20s'], fixture('app.mjs'), {workers: 1});
	const connection = await RawConnection.open(app.port);
	t.teardown(() => {
		connection.close();
	});
	connection.socket.write('GET /trickle?ms=1800 HTTP/1.1\r\nHost: x\r\n\r\n');
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'stopped listening; waiting for requests in flight');
	// Past the first second, so that it lands in a second of its own.
	await new Promise(resolve => {
		setTimeout(resolve, 900);
	});
	connection.socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
	t.is((await app.exited).code, 0, app.text());
	const finished = app.lines.find(line => line.msg === 'drain finished')!;
	const bySecond = finished['arrivalsBySecond'] as number[];
	t.is(finished['arrivals'], 1);
	t.true(Number(finished['lastArrivalMs']) > Number(finished['rejectEndedMs']) + 500, JSON.stringify(finished));
	t.is(bySecond.reduce((sum, count) => sum + count, 0), 1, JSON.stringify(bySecond));
	t.is(bySecond.length, 2);
	// Said as it was: after the reject phase, not in its last second (found by a hostile trial).
	t.regex(String(finished['advice']), /^app requests still arrived after the reject phase ended, the last \d+\.\d s after it, on connections still open/);
	t.truthy(app.lines.find(line => line.role === 'primary' && line.level === 'warn' && String(line.msg).startsWith('app requests still arrived after the reject phase ended')));
	t.falsy(app.lines.find(line => String(line.msg).includes('in the last second of the reject period')));
});

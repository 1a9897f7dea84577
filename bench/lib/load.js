// autocannon, driven through its programmatic API, against 127.0.0.1. The p99 is
// computed here from every response's own time (autocannon's histogram rounds
// to whole milliseconds, too coarse for a 1.05x goal at ~1-3 ms latencies).
import {performance} from 'node:perf_hooks';
import autocannon from 'autocannon';
import process from 'node:process';
import {cpuMs, machineBusyMs} from './proc.js';
import {percentile} from './stats.js';

const MAX_SAMPLES = 2_000_000;
const samples = new Float64Array(MAX_SAMPLES);

export async function load(url, {duration, connections = 50, headers = {}, path = '/', pids = []}) {
	let count = 0;
	const cpuBefore = cpuMs(pids);
	const busyBefore = machineBusyMs();
	const selfBefore = process.cpuUsage();
	const startedAt = performance.now();
	const instance = autocannon({
		url: url + path,
		connections,
		pipelining: 1,
		duration,
		headers,
		timeout: 10,
	});
	instance.on('response', (_client, statusCode, _bytes, responseTime) => {
		if (statusCode < 300 && count < MAX_SAMPLES) {
			samples[count++] = responseTime;
		}
	});
	const result = await instance;
	const elapsedS = (performance.now() - startedAt) / 1000;
	const cpu = cpuMs(pids) - cpuBefore;
	const self = process.cpuUsage(selfBefore);
	const busy = machineBusyMs() - busyBefore;
	// CPU used by processes other than the servers under test and this one (other
	// people's builds and tests on a shared machine), in cores.
	const foreign = Math.max(0, busy - cpu - ((self.user + self.system) / 1000)) / (elapsedS * 1000);
	const latencies = samples.slice(0, count).sort();
	const codes = {};
	for (const [code, {count: n}] of Object.entries(result.statusCodeStats ?? {})) {
		codes[code] = n;
	}

	const seconds = result.duration || elapsedS;
	return {
		ok: result['2xx'],
		codes,
		rate: code => (codes[code] ?? 0) / seconds,
		rps: result['2xx'] / seconds,
		/** Server CPU (all `pids`) per response, in microseconds. */
		cpuUs: (cpu * 1000) / Math.max(1, result.totalCompletedRequests ?? result['2xx']),
		/** Server CPU (all `pids`) per response with status `code`, in microseconds. */
		cpuUsPer: code => (cpu * 1000) / Math.max(1, codes[code] ?? 0),
		p99: percentile(latencies, 99),
		errors: result.errors,
		timeouts: result.timeouts,
		resets: result.resets,
		seconds,
		foreign,
	};
}

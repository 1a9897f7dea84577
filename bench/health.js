// The health features' costs (issue "Hung workers"), each side by side in the same run:
//
//   node bench/health.js memory [workers=4]      RSS per worker, --hung-stack on vs off
//   node bench/health.js primary [workers=16] <baseDist>  the primary's CPU with every worker beating vs a build without heartbeats
//   node bench/health.js counter <distA> <distB> attach() hello-world req/s and p99, two builds alternating
//   node bench/health.js --help
//
// Run after `npm run build`; the CLI under test is ../dist. Every process is
// started through lib/proc.js (the test kit's process groups), and every group
// is killed when the run ends or is interrupted.
import {readFileSync} from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import process from 'node:process';
import {pathToFileURL} from 'node:url';
import {cpuMs, killAll, killAllOnSignal, paths, sleep, start, useDist, waitExit} from './lib/proc.js';
import {fmt, percentile, summary} from './lib/stats.js';

const APP = new URL('../test/fixtures/health.mjs', import.meta.url).pathname;
useDist(new URL('../dist', import.meta.url).pathname);

/** Starts a CLI on the fixture; resolves once every worker listens, with their pids. */
async function cluster(args, workers, cli = paths.cli) {
	const proc = start([cli, '--workers', String(workers), '--reject-period', '0', ...args, APP]);
	await proc.msg('worker listening', {count: workers});
	return {
		proc,
		pids: proc.lines.filter(line => line.msg === 'worker listening').map(line => line.workerPid),
		async stop() {
			proc.signal('SIGTERM');
			await waitExit(proc);
		},
	};
}

const rssKb = pid => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

async function memory(workers = 4, rounds = 3) {
	const rss = {off: [], on: []};
	for (let round = 0; round < rounds; round++) {
		for (const mode of round % 2 === 0 ? ['off', 'on'] : ['on', 'off']) {
			const c = await cluster(['--hung-stack', mode], workers);
			// Not a wait for anything: the figure is the RSS of a worker idle for 3 s.
			await sleep(3000);
			rss[mode].push(...c.pids.map(pid => rssKb(pid) / 1024));
			await c.stop();
		}
	}

	const off = summary(rss.off);
	const on = summary(rss.on);
	console.log(`RSS per worker, idle, ${workers} workers x ${rounds} rounds: --hung-stack off ${fmt(off, {decimals: 1, unit: ' MB'})}, on ${fmt(on, {decimals: 1, unit: ' MB'})}; the thread costs ${(on.median - off.median).toFixed(1)} MB per worker`);
}

async function primary(workers, baseDist, seconds = 20, rounds = 2) {
	const used = {'30s': [], 0: []};
	for (let round = 0; round < rounds; round++) {
		for (const timeout of round % 2 === 0 ? ['30s', '0'] : ['0', '30s']) {
			// '0': the build before heartbeats (its workers send nothing).
			const c = timeout === '0' ? await cluster([], workers, `${baseDist}/src/cli.js`) : await cluster(['--worker-timeout', timeout], workers);
			// Not waits for anything: 3 s for the start-up to settle, then the window measured.
			await sleep(3000);
			const before = cpuMs([c.proc.pid]);
			await sleep(seconds * 1000);
			used[timeout].push((cpuMs([c.proc.pid]) - before) / (seconds * 1000) * 100);
			await c.stop();
		}
	}

	console.log(`primary CPU, ${workers} idle workers, ${rounds} rounds of ${seconds} s: heartbeats and watchdog (--worker-timeout 30s, ${workers} IPC messages/s) ${fmt(summary(used['30s']), {decimals: 2, unit: '%'})} of one core; the build without heartbeats ${fmt(summary(used[0]), {decimals: 2, unit: '%'})}`);
}

/** A hello-world attach() server from `dist`, in its own process; resolves once it listens, with its port. */
async function server(dist) {
	const code = `
		import http from 'node:http';
		const {attach} = await import(${JSON.stringify(pathToFileURL(`${dist}/src/worker/index.js`).href)});
		const s = http.createServer((q, r) => r.end('hello'));
		attach(s);
		s.listen(0, () => console.log(JSON.stringify({msg: 'bench server listening', port: s.address().port})));`;
	const proc = start(['--input-type=module', '-e', code]);
	const {port} = await proc.msg('bench server listening');
	return {proc, port};
}

async function load(port, ms, connections = 20) {
	const agent = new http.Agent({keepAlive: true, maxSockets: connections});
	const latencies = [];
	const until = performance.now() + ms;
	const loop = async () => {
		while (performance.now() < until) {
			const sentAt = performance.now();
			await new Promise((resolve, reject) => {
				http.get({port, host: '127.0.0.1', agent, path: '/'}, response => {
					response.resume();
					response.on('end', resolve);
				}).on('error', reject);
			});
			latencies.push(performance.now() - sentAt);
		}
	};

	await Promise.all(Array.from({length: connections}, loop));
	agent.destroy();
	latencies.sort((a, b) => a - b);
	return {rps: latencies.length / (ms / 1000), p99: percentile(latencies, 99)};
}

async function counter(distA, distB, rounds = 8) {
	const result = {[distA]: {rps: [], p99: []}, [distB]: {rps: [], p99: []}};
	for (let round = 0; round < rounds; round++) {
		for (const dist of round % 2 === 0 ? [distA, distB] : [distB, distA]) {
			const {proc, port} = await server(dist);
			await load(port, 500);
			const {rps, p99} = await load(port, 2000);
			result[dist].rps.push(rps);
			result[dist].p99.push(p99);
			proc.stop();
		}
	}

	for (const [dist, {rps, p99}] of Object.entries(result)) {
		console.log(`${dist}: ${fmt(summary(rps), {decimals: 0, unit: ' req/s'})}, p99 ${fmt(summary(p99), {decimals: 2, unit: ' ms'})}`);
	}

	const ratio = (key, index) => summary(result[distB][key].map((value, i) => value / result[distA][key][i]))[index];
	console.log(`B/A per round: req/s ${ratio('rps', 'median').toFixed(3)}x (${ratio('rps', 'min').toFixed(2)}-${ratio('rps', 'max').toFixed(2)}), p99 ${ratio('p99', 'median').toFixed(3)}x (${ratio('p99', 'min').toFixed(2)}-${ratio('p99', 'max').toFixed(2)})`);
}

const USAGE = `usage: node bench/health.js memory [workers=4]              RSS per worker, --hung-stack on vs off (3 rounds, about 30 s)
       node bench/health.js primary [workers=16] <baseDist>  the primary's CPU, heartbeats vs a build without (2 rounds of 20 s each side)
       node bench/health.js counter <distA> <distB>         attach() hello-world req/s and p99, two builds alternating (8 rounds of 2 s each)`;

killAllOnSignal();
const [what, ...rest] = process.argv.slice(2);
// The builds are paths from where the command runs (path.resolve): the children run in the repository.
try {
	if (what === 'memory') {
		await memory(Number(rest[0] ?? 4));
	} else if (what === 'primary' && rest[1] !== undefined) {
		await primary(Number(rest[0] ?? 16), path.resolve(rest[1]));
	} else if (what === 'counter' && rest[1] !== undefined) {
		await counter(path.resolve(rest[0]), path.resolve(rest[1]));
	} else if (what === '--help' || what === '-h') {
		console.log(USAGE);
	} else {
		console.error(USAGE);
		process.exitCode = 2;
	}
} finally {
	killAll();
}

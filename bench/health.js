// The health features' costs (issue "Hung workers"), each side by side in the same run:
//
//   node bench/health.js memory [workers=4]      RSS per worker, --hung-stack on vs off
//   node bench/health.js primary [workers=16] <baseDist>  the primary's CPU with every worker beating vs a build without heartbeats
//   node bench/health.js counter <distA> <distB> attach() hello-world req/s and p99, two builds alternating
//
// Run after `npm run build`; the CLI under test is ../dist.
import {execFileSync, spawn} from 'node:child_process';
import {readFileSync} from 'node:fs';
import http from 'node:http';
import {setTimeout as delay} from 'node:timers/promises';
import process from 'node:process';
import {fmt, percentile, summary} from './lib/stats.js';

const CLI = new URL('../dist/src/cli.js', import.meta.url).pathname;
const APP = new URL('../test/fixtures/health.mjs', import.meta.url).pathname;

/** Starts the CLI; resolves with the child and its workers' pids once all listen. */
async function cluster(args, workers, cli = CLI) {
	const child = spawn(process.execPath, [cli, '--workers', String(workers), '--reject-period', '0', ...args, APP], {stdio: ['ignore', 'pipe', 'inherit'], detached: true});
	const pids = [];
	let port;
	let buffer = '';
	await new Promise((resolve, reject) => {
		child.stdout.on('data', chunk => {
			buffer += chunk;
			let newline;
			while ((newline = buffer.indexOf('\n')) !== -1) {
				const line = buffer.slice(0, newline);
				buffer = buffer.slice(newline + 1);
				try {
					const parsed = JSON.parse(line);
					if (parsed.msg === 'worker listening') {
						pids.push(parsed.workerPid);
						port = Number(String(parsed.address).split(':').pop());
						if (pids.length === workers) {
							resolve();
						}
					}
				} catch {}
			}
		});
		child.once('exit', () => reject(new Error('the CLI exited early')));
	});
	child.stdout.resume();
	return {
		child, pids, port,
		async stop() {
			process.kill(-child.pid, 'SIGTERM');
			await new Promise(resolve => {
				child.once('exit', resolve);
			});
		},
	};
}

const rssKb = pid => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const cpuTicks = pid => {
	const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
	return Number(fields[11]) + Number(fields[12]);
};

async function memory(workers = 4, rounds = 3) {
	const rss = {off: [], on: []};
	for (let round = 0; round < rounds; round++) {
		for (const mode of round % 2 === 0 ? ['off', 'on'] : ['on', 'off']) {
			// eslint-disable-next-line no-await-in-loop
			const c = await cluster(['--hung-stack', mode], workers);
			// eslint-disable-next-line no-await-in-loop
			await delay(3000);
			rss[mode].push(...c.pids.map(pid => rssKb(pid) / 1024));
			// eslint-disable-next-line no-await-in-loop
			await c.stop();
		}
	}

	const off = summary(rss.off);
	const on = summary(rss.on);
	console.log(`RSS per worker, idle, ${workers} workers x ${rounds} rounds: --hung-stack off ${fmt(off, {decimals: 1, unit: ' MB'})}, on ${fmt(on, {decimals: 1, unit: ' MB'})}; the thread costs ${(on.median - off.median).toFixed(1)} MB per worker`);
}

async function primary(workers, baseDist, seconds = 20, rounds = 2) {
	const hz = Number(execFileSync('getconf', ['CLK_TCK'], {encoding: 'utf8'}));
	const used = {'30s': [], 0: []};
	for (let round = 0; round < rounds; round++) {
		for (const timeout of round % 2 === 0 ? ['30s', '0'] : ['0', '30s']) {
			// '0': the build before heartbeats (its workers send nothing).
			// eslint-disable-next-line no-await-in-loop
			const c = timeout === '0' ? await cluster([], workers, `${baseDist}/src/cli.js`) : await cluster(['--worker-timeout', timeout], workers);
			// eslint-disable-next-line no-await-in-loop
			await delay(3000);
			const before = cpuTicks(c.child.pid);
			// eslint-disable-next-line no-await-in-loop
			await delay(seconds * 1000);
			used[timeout].push((cpuTicks(c.child.pid) - before) / hz / seconds * 100);
			// eslint-disable-next-line no-await-in-loop
			await c.stop();
		}
	}

	console.log(`primary CPU, ${workers} idle workers, ${rounds} rounds of ${seconds} s: heartbeats and watchdog (--worker-timeout 30s, ${workers} IPC messages/s) ${fmt(summary(used['30s']), {decimals: 2, unit: '%'})} of one core; the build without heartbeats ${fmt(summary(used[0]), {decimals: 2, unit: '%'})}`);
}

/** A hello-world attach() server from `dist`, in its own process. */
function server(dist) {
	const code = `
		import http from 'node:http';
		const {attach} = await import(${JSON.stringify(`${dist}/src/worker/index.js`)});
		const s = http.createServer((q, r) => r.end('hello'));
		attach(s);
		s.listen(0, () => process.send(s.address().port));`;
	const child = spawn(process.execPath, ['--input-type=module', '-e', code], {stdio: ['ignore', 'ignore', 'inherit', 'ipc']});
	return new Promise(resolve => {
		child.once('message', port => resolve({child, port}));
	});
}

async function load(port, ms, connections = 20) {
	const agent = new http.Agent({keepAlive: true, maxSockets: connections});
	const latencies = [];
	const until = performance.now() + ms;
	const loop = async () => {
		while (performance.now() < until) {
			const start = performance.now();
			// eslint-disable-next-line no-await-in-loop
			await new Promise((resolve, reject) => {
				http.get({port, host: '127.0.0.1', agent, path: '/'}, response => {
					response.resume();
					response.on('end', resolve);
				}).on('error', reject);
			});
			latencies.push(performance.now() - start);
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
			// eslint-disable-next-line no-await-in-loop
			const {child, port} = await server(dist);
			// eslint-disable-next-line no-await-in-loop
			await load(port, 500);
			// eslint-disable-next-line no-await-in-loop
			const {rps, p99} = await load(port, 2000);
			result[dist].rps.push(rps);
			result[dist].p99.push(p99);
			child.kill();
		}
	}

	for (const [dist, {rps, p99}] of Object.entries(result)) {
		console.log(`${dist}: ${fmt(summary(rps), {decimals: 0, unit: ' req/s'})}, p99 ${fmt(summary(p99), {decimals: 2, unit: ' ms'})}`);
	}

	const ratio = (key, index) => summary(result[distB][key].map((value, i) => value / result[distA][key][i]))[index];
	console.log(`B/A per round: req/s ${ratio('rps', 'median').toFixed(3)}x (${ratio('rps', 'min').toFixed(2)}-${ratio('rps', 'max').toFixed(2)}), p99 ${ratio('p99', 'median').toFixed(3)}x (${ratio('p99', 'min').toFixed(2)}-${ratio('p99', 'max').toFixed(2)})`);
}

const [what, ...rest] = process.argv.slice(2);
switch (what) {
	case 'memory': {
		await memory(Number(rest[0] ?? 4));
		break;
	}

	case 'primary': {
		await primary(Number(rest[0] ?? 16), rest[1]);
		break;
	}

	case 'counter': {
		await counter(rest[0], rest[1]);
		break;
	}

	default: {
		console.error('usage: node bench/health.js memory|primary|counter ...');
		process.exitCode = 2;
	}
}

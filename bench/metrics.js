// --metrics under load (the metrics issue): does a scrape every second disturb
// serving? One cluster of 4 workers (the app: prom-client default metrics and a
// counter, given with attach(server, {metricsRegistry})), loaded by autocannon;
// rounds alternate between a scraper hitting /metrics every second and none, so
// each figure sits beside its baseline from the same run. Then the primary's RSS
// with and without --metrics.
//
//   npm run build && node bench/metrics.js [--rounds=6] [--duration=3]
import {readFileSync} from 'node:fs';
import http from 'node:http';
import process from 'node:process';
import {load} from './lib/load.js';
import {freePort, groupPids, killAll, paths, sleep, start, useDist} from './lib/proc.js';
import {summary} from './lib/stats.js';

const arg = (name, fallback) => Number(process.argv.find(a => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);
const ROUNDS = arg('rounds', 6);
const DURATION = arg('duration', 3);
const WORKERS = 4;
const CONNECTIONS = 20;
const APP = new URL('servers/metrics-hello.mjs', import.meta.url).pathname;
useDist(new URL('../dist', import.meta.url).pathname);

const log = text => process.stderr.write(`${text}\n`);
const vmRssMb = pid => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;

function get(port, path) {
	return new Promise((resolve, reject) => {
		const started = performance.now();
		http.get({host: '127.0.0.1', port, path, agent: false}, response => {
			let body = '';
			response.setEncoding('utf8');
			response.on('data', chunk => {
				body += chunk;
			});
			response.on('end', () => resolve({status: response.statusCode, body, ms: performance.now() - started}));
		}).on('error', reject);
	});
}

async function cluster(metrics) {
	const port = await freePort();
	const metricsPort = metrics ? await freePort() : undefined;
	const flags = metrics ? ['--metrics', `127.0.0.1:${metricsPort}`] : [];
	const proc = start([paths.cli, '-w', String(WORKERS), ...flags, APP], {env: {PORT: String(port)}, stdout: 'file'});
	await proc.msg('worker listening', {count: WORKERS});
	return {proc, port, metricsPort};
}

const fmt = (s, d = 0) => `${s.median.toFixed(d)} (${s.min.toFixed(d)}-${s.max.toFixed(d)})`;

try {
	const {proc, port, metricsPort} = await cluster(true);
	const pids = groupPids(proc);
	await load(`http://127.0.0.1:${port}`, {duration: 2, connections: CONNECTIONS, pids});
	const rounds = {scraped: [], quiet: []};
	const scrapeMs = [];
	let scrapeBytes = 0;
	for (let round = 0; round < ROUNDS; round++) {
		for (const kind of round % 2 === 0 ? ['scraped', 'quiet'] : ['quiet', 'scraped']) {
			let scraping = kind === 'scraped';
			const scraper = (async () => {
				while (scraping) {
					const response = await get(metricsPort, '/metrics');
					scrapeMs.push(response.ms);
					scrapeBytes = response.body.length;
					await sleep(1000);
				}
			})();
			const result = await load(`http://127.0.0.1:${port}`, {duration: DURATION, connections: CONNECTIONS, pids});
			scraping = false;
			await scraper;
			rounds[kind].push(result);
			log(`round ${round} ${kind}: ${result.rps.toFixed(0)} req/s, p99 ${result.p99.toFixed(2)} ms, ${result.cpuUs.toFixed(1)} µs CPU/req, foreign ${result.foreign.toFixed(2)} cores, errors ${result.errors}`);
		}
	}

	const final = await get(metricsPort, '/metrics');
	const failures = /graceful_cluster_metrics_scrape_failures_total (\d+)/.exec(final.body)?.[1];
	const served = /app_requests_total\{route="\/",code="200"\} (\d+)/.exec(final.body)?.[1];
	proc.stop();

	const ratio = (a, b) => a.map((x, i) => x / b[i]);
	const rps = {scraped: rounds.scraped.map(r => r.rps), quiet: rounds.quiet.map(r => r.rps)};
	const p99 = {scraped: rounds.scraped.map(r => r.p99), quiet: rounds.quiet.map(r => r.p99)};
	// Server CPU per response (primary and workers): the least sensitive to other load on the machine.
	const cpu = {scraped: rounds.scraped.map(r => r.cpuUs), quiet: rounds.quiet.map(r => r.cpuUs)};

	// The primary's RSS: idle, 4 workers, after 10 scrapes (metrics on) or none (off).
	const rss = {off: [], on: []};
	for (let round = 0; round < 3; round++) {
		for (const metrics of [false, true]) {
			const c = await cluster(metrics);
			if (metrics) {
				for (let i = 0; i < 10; i++) {
					await get(c.metricsPort, '/metrics');
				}
			}

			await sleep(500);
			rss[metrics ? 'on' : 'off'].push(vmRssMb(c.proc.pid));
			c.proc.stop();
		}
	}

	const out = {
		date: new Date().toISOString(),
		node: process.version,
		workers: WORKERS,
		connections: CONNECTIONS,
		rounds: ROUNDS,
		durationS: DURATION,
		rpsScraped: summary(rps.scraped),
		rpsQuiet: summary(rps.quiet),
		rpsRatio: summary(ratio(rps.scraped, rps.quiet)),
		p99Scraped: summary(p99.scraped),
		p99Quiet: summary(p99.quiet),
		p99Ratio: summary(ratio(p99.scraped, p99.quiet)),
		cpuUsScraped: summary(cpu.scraped),
		cpuUsQuiet: summary(cpu.quiet),
		cpuRatio: summary(ratio(cpu.scraped, cpu.quiet)),
		scrapeMs: summary(scrapeMs),
		scrapeBytes,
		scrapeFailures: Number(failures),
		appRequestsCounted: Number(served),
		rssOffMb: summary(rss.off),
		rssOnMb: summary(rss.on),
		foreignCores: summary([...rounds.scraped, ...rounds.quiet].map(r => r.foreign)),
	};
	log(`throughput scraped/quiet ${fmt(out.rpsRatio, 3)}; p99 ${fmt(out.p99Ratio, 3)}; CPU/req ${fmt(out.cpuRatio, 3)}; scrape ${fmt(out.scrapeMs, 1)} ms; RSS off ${fmt(out.rssOffMb, 1)} MB, on ${fmt(out.rssOnMb, 1)} MB`);
	process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
} finally {
	killAll();
}

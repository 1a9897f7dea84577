// Start time of the command (issue 21, item 1), in one run, every case in turn
// in each round (the order rotates from round to round) so that a drift of the
// machine's speed moves them all alike:
//
//   start:  `graceful-cluster -w 2 app` until both workers listen (the primary's
//           'worker listening' lines), vs a hand-written node:cluster primary
//           running the same app (servers/cluster.mjs) until both listen, with
//           attach() in the app or without, vs plain `node app` until it
//           listens; the app is servers/hello.mjs, without attach() unless said
//           and the CPU the process group had used by then (every process and
//           thread): on 2 cores the start follows that sum
//   flags:  `graceful-cluster --version` and `--help` until exit, vs `node -e 0`
//
//   node bench/startup.js [--rounds 15] [--warmup 2] [--dist [label=]dir ...] [--only start|flags]
//
// --dist names the build to run (a dist/ dir: its bundle/cli.cjs or cli.js, or src/cli.js in a
// build from before the bundle; ../dist by default).
// Given more than once, every build's cases join the same rounds, so that two
// builds (before and after a change) are compared under the same conditions.
//
// Each figure is from just before the spawn to the line (or the exit), read
// here through a pipe; each server is then killed with its process group and
// reaped before the next one starts. Medians (min-max); a ratio is taken round
// by round, then its median. Run after `npm run build`. Nothing else should run
// on the machine meanwhile: on 2 cores another process's CPU is in the figures.
import {existsSync} from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import {parseArgs} from 'node:util';
import {flagCases, measure, startCases, table} from './lib/startup.js';

const {values: flags} = parseArgs({options: {
	rounds: {type: 'string', default: '15'},
	warmup: {type: 'string', default: '2'},
	dist: {type: 'string', multiple: true, default: [new URL('../dist', import.meta.url).pathname]},
	only: {type: 'string'},
	help: {type: 'boolean', short: 'h'},
}});
if (flags.help) {
	process.stdout.write('node bench/startup.js [--rounds 15] [--warmup 2] [--dist [label=]dir ...] [--only start|flags]\n');
	process.exit(0);
}

/** Each build under test: its label (none for a single build) and its CLI. */
const BUILDS = flags.dist.map(spec => {
	const [label, dir] = spec.includes('=') ? spec.split(/=(.*)/s) : [flags.dist.length > 1 ? path.basename(path.resolve(spec)) : '', spec];
	const dist = path.resolve(dir);
	// What the package runs (package.json's bin and exports), or a build from before the bundle: the compiled tree.
	// The CLI is bundle/cli.cjs since it became CommonJS, bundle/cli.js before.
	const bundleCli = ['bundle/cli.cjs', 'bundle/cli.js'].map(file => path.join(dist, file)).find(file => existsSync(file));
	const [cli, worker] = bundleCli ? [bundleCli, path.join(dist, 'bundle/worker/index.js')] : ['src/cli.js', 'src/worker/index.js'].map(file => path.join(dist, file));
	if (!existsSync(cli)) {
		throw new Error(`${cli} is missing: run \`npm run build\` first (or give --dist).`);
	}

	return {label, dist, cli, worker};
});
const ROUNDS = Number(flags.rounds);
const WARMUP = Number(flags.warmup);

process.stdout.write(`node ${process.version}, ${ROUNDS} rounds (+${WARMUP} warm-up); ${BUILDS.map(({label, cli}) => (label ? `${label}: ${cli}` : cli)).join(', ')}${process.env.NODE_EXTRA_CA_CERTS ? '; NODE_EXTRA_CA_CERTS is set (every node process reads it at start)' : ''}\n\n`);
if (flags.only !== 'flags') {
	const cpu = {};
	const times = await measure(startCases(BUILDS), {rounds: ROUNDS, warmup: WARMUP, cpu});
	const baselines = ['node:cluster primary, 2 workers', 'node:cluster primary, 2 workers (attach)', 'node app'];
	process.stdout.write(`start: spawn -> all workers listening\n${table(times, baselines)}\n\n`);
	// On 2 cores three processes share them: the start follows the CPU they use in all.
	process.stdout.write(`CPU used by then, all processes and threads of the group\n${table(cpu, baselines)}\n\n`);
}

if (flags.only !== 'start') {
	process.stdout.write(`flags: spawn -> exit\n${table(await measure(flagCases(BUILDS), {rounds: ROUNDS, warmup: WARMUP}), ['node -e 0'])}\n`);
}

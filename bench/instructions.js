// The hot path as instructions per request (issue 21, item 2): what CPU time per
// request (hot-path.js) cannot resolve on a shared machine. There, the same build
// against itself (the twin) spreads by ±3 %, as much as the costs looked for.
// Here each server runs under valgrind's callgrind, which counts the instructions
// it executes: the count does not depend on what else the machine runs, and two
// processes of the same build agree within about 0.5 %.
//
// What is counted: the server's instructions over N requests, divided by N,
// without those of V8's garbage collector and optimizing compilers (told apart
// by their function names). Both of those run when a heap limit or a hotness
// counter says so: a collection that falls inside one target's counted window
// and not inside the other's moved a target's count by 10-20 % in trials. Each
// server is warmed up on W requests, then collected in full (SIGUSR2, --expose-gc),
// warmed up again on W2 (the collection also drops compiled code), and counted
// on the next N. Node runs with --single-threaded, so that the compiler's and
// the collector's work is done on the main thread, where its names can be seen.
//
// Not a time: an instruction that misses the cache costs more than one that
// hits. Beside the CPU figure, it says where a cost of 1-3 % really is.
//
//   node bench/instructions.js [--cases=keep-alive,h2c,new-connection,websocket] [--rounds=N] [--worker=name=file ...]
//
// Needs valgrind (Debian: `apt-get install valgrind`). A round is about 30-40 s
// per target; the default (keep-alive and h2c, 3 rounds) takes about 6 minutes.
import {execFileSync} from 'node:child_process';
import {mkdtempSync, readdirSync, rmSync, statSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';
import {PROTOCOL_CASES, PROTOCOLS, inTurn} from './hot-path.js';
import {killAll, killAllOnSignal, paths, snapshotDist, start, useDist} from './lib/proc.js';
import {createReport, log} from './lib/report.js';
import {fmt, summary} from './lib/stats.js';

/** Requests: warm-up before the full collection, warm-up after it, counted. */
const WARM = 20_000;
const WARM_AGAIN = 8000;
const COUNTED = 4000;
/** Compiler instructions per counted request above which a process is still recompiling (see `settled`). */
const COMPILING_PER_REQUEST = 5000;

/**
 * Functions of V8's garbage collector, and of its compilers and parser, by the
 * names valgrind reads from node's symbols. Everything else (the JIT's code,
 * V8's builtins, Node's C++, libc, the kernel's share is not seen) is counted.
 */
const COLLECTOR = /Mark|Sweep|Scaveng|Evacuat|LiveObject|BodyDescriptor|RecordMigrated|StringTableCleaner|IterateObjectCache|Heap::|SizeFromMap|MemoryAllocator|WriteBarrier|RememberedSet|SlotSet|Worklist|MinorGC|GCTracer|Compaction|PagedSpace|Page::|MemoryChunk|ConcurrentMarking|IncrementalMarking|StoreBuffer|Visitor|RecordWrite/;
const COMPILER = /v8::internal::compiler::|v8::internal::maglev|Zone|baseline::|interpreter::Bytecode(Generator|ArrayBuilder)|Parser|Scanner|AstNode|CodeAssembler|RegisterAllocat|Assembler|SourcePosition|OptimizedCompilationInfo|Compiler::|Deoptimizer|InstructionSelector/;

function tool(name) {
	try {
		execFileSync(name, ['--version'], {stdio: 'ignore'});
		return true;
	} catch {
		return false;
	}
}

/** Instructions in a callgrind dump: counted (`mutator`), the collector's, the compiler's. */
function readDump(file) {
	const text = execFileSync('callgrind_annotate', ['--inclusive=no', '--threshold=100', file], {encoding: 'utf8', maxBuffer: 256 * 1024 * 1024});
	const sums = {mutator: 0, collector: 0, compiler: 0};
	for (const line of text.split('\n')) {
		const match = /^\s*([\d,]+)\s+\([^)]*\)\s+(.*)$/.exec(line);
		if (!match || match[2].includes('PROGRAM TOTALS')) {
			continue;
		}

		const count = Number(match[1].replaceAll(',', ''));
		const name = match[2];
		sums[COLLECTOR.test(name) ? 'collector' : (COMPILER.test(name) ? 'compiler' : 'mutator')] += count;
	}

	return sums;
}

/** One server under callgrind: warmed up, collected, warmed up again, counted on COUNTED requests. */
async function count(testCase, wrap, worker) {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-instructions-'));
	const server = start([
		'-q', '--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${path.join(dir, 'callgrind.out')}`,
		process.execPath, '--single-threaded', '--expose-gc', PROTOCOLS,
	], {command: 'valgrind', env: {PORT: '0', BENCH_PROTO: testCase.proto, BENCH_WRAP: wrap, BENCH_WORKER: worker, BENCH_GC_SIGNAL: '1'}});
	try {
		const {port} = await server.msg('listening', {timeoutMs: 120_000});
		await testCase.send(port, WARM);
		server.signal('SIGUSR2');
		await server.msg('collected', {timeoutMs: 120_000});
		await testCase.send(port, WARM_AGAIN);
		execFileSync('callgrind_control', ['--instr=on', String(server.pid)], {stdio: 'ignore'});
		const result = await testCase.send(port, COUNTED);
		execFileSync('callgrind_control', ['--dump', String(server.pid)], {stdio: 'ignore'});
		if (result.ok !== COUNTED) {
			throw new Error(`${testCase.id} ${wrap}: ${result.ok} of ${COUNTED} answered with a 2xx`);
		}

		// The dump callgrind_control asked for; the file of the exit (if any) is empty.
		const dumps = readdirSync(dir).map(file => path.join(dir, file)).filter(file => statSync(file).size > 0).map(file => readDump(file));
		if (dumps.length !== 1) {
			throw new Error(`${testCase.id} ${wrap}: expected one callgrind dump, found ${dumps.length}`);
		}

		const [sums] = dumps;
		return Object.fromEntries(Object.entries(sums).map(([key, value]) => [key, value / COUNTED]));
	} finally {
		server.stop();
		rmSync(dir, {recursive: true, force: true});
	}
}

export async function figureInstructions(report, {rounds = 3, cases = ['keep-alive', 'h2c'], workers = {}} = {}) {
	if (!tool('valgrind') || !tool('callgrind_control')) {
		report.row('instructions per request, `attach(server)`', 'same server, no helper', 'not measured: valgrind is not installed (Debian: `apt-get install valgrind`)', '-', 'skipped');
		return;
	}

	for (const testCase of PROTOCOL_CASES.filter(({id}) => cases.includes(id))) {
		log(`instructions per request under callgrind, attach() vs bare: ${testCase.name}`);
		const targets = {bare: ['none', paths.worker], attach: ['attach', paths.worker], ...Object.fromEntries(Object.entries(workers).map(([name, file]) => [name, ['attach', file]]))};
		const names = Object.keys(targets);
		const all = [];
		for (let index = 0; index < rounds; index++) {
			const result = {};
			// The order turns from round to round, as in hot-path.js.
			for (const name of inTurn(names, index)) {
				result[name] = await count(testCase, ...targets[name]);
			}

			log(`  ${testCase.id} round ${index + 1}: ${names.map(name => `${name} ${(result[name].mutator / 1000).toFixed(2)}k`).join(', ')} (collector ${names.map(name => (result[name].collector / 1000).toFixed(2)).join('/')}k, compiler ${names.map(name => (result[name].compiler / 1000).toFixed(2)).join('/')}k)`);
			all.push(result);
		}

		// A process settles in one of two states: in most, about two dozen of Node's
		// stream functions are compiled again in every counted window (seen with
		// --trace-opt under valgrind, with the helper and without it); in some they
		// stay compiled, and the process runs several % fewer instructions (h2c: 137k
		// against 146-152k). A round whose targets landed in different states
		// compares the states, not the builds: left out.
		const settled = result => Object.values(result).map(sums => sums.compiler > COMPILING_PER_REQUEST);
		const used = all.filter(result => new Set(settled(result)).size === 1);
		const rows = used.length > 0 ? used : all;
		const ratio = name => summary(rows.map(result => result[name].mutator / result.bare.mutator));
		const median = name => summary(rows.map(result => result[name].mutator)).median;
		if (used.length < all.length) {
			report.note(`${testCase.name}, instructions: ${all.length - used.length} of ${all.length} rounds left out${used.length === 0 ? ' (none left: all kept)' : ''}: one target's V8 recompiled in its counted window, another's did not (see \`settled\` in bench/instructions.js).`);
		}

		report.row(`instructions per request (valgrind, the collector and the compilers left out), \`attach(server)\`: ${testCase.name}, ${COUNTED} counted per process`,
			'same server, no helper',
			`${fmt(ratio('attach'), {unit: 'x', decimals: 3})}; ${(median('attach') / 1000).toFixed(2)}k vs ${(median('bare') / 1000).toFixed(2)}k`,
			'resolves the CPU figure\'s <= 1.03x', 'reported');
		for (const name of Object.keys(workers)) {
			report.note(`${testCase.name}, instructions: --worker ${name} vs bare ${fmt(ratio(name), {unit: 'x', decimals: 3})}, vs attach ${fmt(summary(rows.map(result => result[name].mutator / result.attach.mutator)), {unit: 'x', decimals: 3})}`);
		}
	}

	report.note(`Instructions: each server under valgrind's callgrind (\`node --single-threaded --expose-gc\`), warmed up on ${WARM} requests, collected in full, warmed up on ${WARM_AGAIN} more, then counted on ${COUNTED}; ${rounds} rounds of fresh processes, the order turning; median (min-max) of the per-round ratios.`);
}

// Run alone: `node bench/instructions.js [--cases=...] [--rounds=N] [--worker=name=file]`.
if (import.meta.url === `file://${process.argv[1]}`) {
	const argv = process.argv.slice(2);
	const value = name => argv.find(arg => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
	const workers = Object.fromEntries(argv.filter(arg => arg.startsWith('--worker=')).map(arg => arg.slice('--worker='.length).split(/=(.*)/s)));
	const report = createReport();
	killAllOnSignal();
	useDist(snapshotDist('instructions'));
	try {
		await figureInstructions(report, {rounds: Number(value('rounds') ?? 3), cases: value('cases')?.split(',') ?? ['keep-alive', 'h2c'], workers});
	} finally {
		killAll();
	}

	process.stdout.write(`${report.markdown()}\n`);
}

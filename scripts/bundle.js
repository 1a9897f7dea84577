// After tsc, in `npm run build`: writes dist/src/help.txt (write-help.js) and
// bundles what the package runs into dist/bundle/ (esbuild): the CLI and the
// worker's two entries, the bootstrap preloaded into every worker and the
// helper the app imports. Both are skipped when nothing they read has changed
// since (the inputs are listed in dist/bundle-inputs.json), so a build with
// nothing to do stays under a second.
//
// Why a bundle: Node loads an ES module tree file by file, and a start reads some
// some 70 of them (our ~60, p-event's). One file per
// entry, plus a chunk or two, starts the primary and each worker tens of
// milliseconds sooner (bench/startup.js). package.json's bin and exports point
// here; dist/src/ stays the compiled tree the unit tests import, with the
// declarations.
//
// Two builds, so that code lands where src/ has it: the CLI's at dist/bundle/,
// the worker's at dist/bundle/worker/. A module that finds a file by URL from
// itself (FINDS_FILES below) must land at the same depth it has in src/; the
// build fails if it did not.
//
// What stays outside, loaded from node_modules as before: yargs (only for
// --help and complaints about an option, args.ts; it also reads its own locale
// files by path), prom-client (only with --metrics) and pino-pretty (only for
// pretty logs). Both stay lazy: a dynamic import() is its own chunk here.
import {execFileSync} from 'node:child_process';
import {copyFileSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync} from 'node:fs';
import path from 'node:path';
import process from 'node:process';

const ROOT = path.resolve(new URL('..', import.meta.url).pathname);
const OUT = path.join(ROOT, 'dist/bundle');
// Beside the bundle, not in it: the tarball ships dist/bundle/.
const INPUTS = path.join(ROOT, 'dist/bundle-inputs.json');

/** What the outputs depend on besides the bundled modules, root-relative. */
const ALSO_READ = ['package.json', 'tsconfig.json', 'scripts/bundle.js', 'scripts/write-help.js', 'node_modules/yargs/package.json', 'dist/src/worker/index.cjs'];
/** What must be there for a skip. */
const OUTPUTS = ['dist/src/help.txt', 'dist/bundle/graceful-cluster-files.json', 'dist/bundle/help.txt', 'dist/bundle/cli.js', 'dist/bundle/worker/bootstrap.js', 'dist/bundle/worker/index.js', 'dist/bundle/worker/index.cjs'];

/** True when the last run's outputs are all there and no file it read is newer than its list. */
function upToDate() {
	try {
		const builtAt = statSync(INPUTS).mtimeMs;
		const inputs = JSON.parse(readFileSync(INPUTS, 'utf8'));
		return OUTPUTS.every(file => existsSync(path.join(ROOT, file))) && inputs.every(file => statSync(path.join(ROOT, file)).mtimeMs <= builtAt);
	} catch {
		return false;
	}
}

if (upToDate()) {
	process.exit(0);
}

// The help text comes from the compiled tree, in a process of its own (it sets the locale).
execFileSync(process.execPath, [path.join(ROOT, 'scripts/write-help.js')], {stdio: 'inherit'});
const {build} = await import('esbuild');

const common = {
	bundle: true,
	splitting: true,
	format: 'esm',
	platform: 'node',
	target: 'node20.19',
	// Names as written: stack traces and any `.name` read at run time stay as in the compiled tree.
	keepNames: true,
	chunkNames: 'chunk-[hash]',
	external: ['yargs', 'prom-client', 'pino-pretty'],
	metafile: true,
	logLevel: 'warning',
	absWorkingDir: ROOT,
};

/** The modules that find a file by URL from their own, each with the build that must keep it at its depth. */
const FINDS_FILES = {
	cli: ['src/package-files.ts', 'src/cli.ts'],
	worker: ['src/worker/bootstrap.ts', 'src/worker/heartbeat.ts', 'src/worker/index.ts'],
};

const builds = {
	cli: {entryPoints: {cli: 'src/cli.ts'}, outdir: OUT, base: 'src'},
	worker: {
		entryPoints: {bootstrap: 'src/worker/bootstrap.ts', index: 'src/worker/index.ts', 'watchdog-thread': 'src/worker/watchdog-thread.ts'},
		outdir: path.join(OUT, 'worker'),
		base: 'src/worker',
	},
};

// Wholly generated: a chunk of an earlier build must not linger.
rmSync(OUT, {recursive: true, force: true});
const read = new Set(ALSO_READ);
/** Adds what a build read to the inputs a later run checks. */
const noteInputs = metafile => {
	for (const input of Object.keys(metafile.inputs)) {
		read.add(path.relative(ROOT, path.resolve(ROOT, input)));
	}
};

for (const [name, {entryPoints, outdir, base}] of Object.entries(builds)) {
	// eslint-disable-next-line no-await-in-loop
	const {metafile} = await build({...common, entryPoints, outdir});
	noteInputs(metafile);

	for (const module of FINDS_FILES[name]) {
		const want = path.relative(base, path.dirname(module));
		const landed = Object.entries(metafile.outputs).filter(([, output]) => module in output.inputs).map(([file]) => path.relative(path.relative(ROOT, outdir), path.dirname(file)));
		if (landed.length === 0 || landed.some(dir => dir !== want)) {
			process.stderr.write(`bundle: ${module} finds files by URL from itself, so it must land in ${path.join(path.relative(ROOT, outdir), want)}/; it landed in ${landed.join(', ') || 'no output'}\n`);
			process.exit(1);
		}
	}

	// No CommonJS code is bundled into the chunks: esbuild would turn its
	// require() of Node's modules into a stub that throws at run time. A banner making a real require() for every
	// chunk cost each process about half a millisecond per chunk, so the build
	// refuses such code instead.
	for (const file of Object.keys(metafile.outputs)) {
		if (file.endsWith('.js') && readFileSync(path.join(ROOT, file), 'utf8').includes('__require')) {
			process.stderr.write(`bundle: ${file} holds CommonJS code that calls require(); keep the package external, or load it with createRequire()\n`);
			process.exit(1);
		}
	}
}

// What the bundle reads beside its code: the prebuilt --help (print-only.ts, when
// write-help.js made it), and the CommonJS entry, which hands over ./index.js.
if (existsSync(path.join(ROOT, 'dist/src/help.txt'))) {
	copyFileSync(path.join(ROOT, 'dist/src/help.txt'), path.join(OUT, 'help.txt'));
}

copyFileSync(path.join(ROOT, 'dist/src/worker/index.cjs'), path.join(OUT, 'worker/index.cjs'));
if (!readFileSync(path.join(OUT, 'worker/index.cjs'), 'utf8').includes('require(\'./index.js\')')) {
	process.stderr.write('bundle: dist/src/worker/index.cjs no longer hands over ./index.js; the bundle\'s copy would not work\n');
	process.exit(1);
}

// The bundle's code files, each with its size: the primary checks them at start,
// and attach() its own build's, so that a partial or truncated copy of the package
// fails at once with exit code 8 rather than at a worker's drain (src/install-check.ts).
// Code only: a tool that strips text files from node_modules (help.txt) breaks nothing.
const MANIFEST = 'graceful-cluster-files.json';
const files = readdirSync(OUT, {recursive: true, withFileTypes: true})
	.filter(entry => entry.isFile() && /\.c?js$/.test(entry.name))
	.map(entry => path.relative(OUT, path.join(entry.parentPath, entry.name)))
	.sort();
writeFileSync(path.join(OUT, MANIFEST), `${JSON.stringify({package: 'graceful-cluster', files: Object.fromEntries(files.map(file => [file, statSync(path.join(OUT, file)).size]))}, null, '\t')}\n`);

writeFileSync(INPUTS, `${JSON.stringify([...read].sort(), null, '\t')}\n`);

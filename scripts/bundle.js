// After tsc, in `npm run build`: copies the declarations the package ships to
// dist/types/ (copyDeclarations), writes dist/src/help.txt (write-help.js) and
// bundles what the package runs into dist/bundle/ (esbuild): the CLI (cli.cjs,
// the bin, and main.cjs), the bootstrap preloaded into every worker
// (worker/bootstrap.cjs) and the helper the app imports (worker/index.js).
// Skipped when nothing it reads has changed since (the inputs are listed in
// dist/bundle-inputs.json), so a build with nothing to do stays under a second.
//
// Why a bundle: Node loads a tree of modules file by file, and a start read
// some 70 of them (our ~60, p-event's). One file per entry starts the primary
// and each worker tens of milliseconds sooner (bench/startup.js); CommonJS for
// what runs at every start, below. package.json's bin and exports point here
// (and their types at dist/types/); dist/src/ stays the compiled tree the unit
// tests import, which the package does not ship; its cli.js runs too (some
// benches use it), preloading the compiled ES bootstrap with --import
// (package-files.ts bootstrapPreload).
//
// Three builds, so that code lands where src/ has it: the CLI's at
// dist/bundle/, the worker's at dist/bundle/worker/. A module that finds a file
// by URL from itself (FINDS_FILES below) must land at the same depth it has in
// src/; the build fails if it did not.
//
// What stays outside, loaded from node_modules as before: yargs (only for
// --help and complaints about an option, args.ts; it also reads its own locale
// files by path), prom-client (only with --metrics) and pino-pretty (only for
// pretty logs). All three stay lazy, behind an import() that runs only when needed.
import {execFileSync} from 'node:child_process';
import {copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync} from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import {pathToFileURL} from 'node:url';

const ROOT = path.resolve(new URL('..', import.meta.url).pathname);
const OUT = path.join(ROOT, 'dist/bundle');
// Beside the bundle, not in it: the tarball ships dist/bundle/.
const INPUTS = path.join(ROOT, 'dist/bundle-inputs.json');

/** What the outputs depend on besides the bundled modules, root-relative. */
const ALSO_READ = ['package.json', 'tsconfig.json', 'scripts/bundle.js', 'scripts/write-help.js', 'node_modules/yargs/package.json', 'dist/src/worker/index.cjs', 'dist/src/exit-codes.js'];
/** What must be there for a skip. */
const OUTPUTS = ['dist/src/help.txt', 'dist/bundle/graceful-cluster-files.json', 'dist/bundle/help.txt', 'dist/bundle/cli.cjs', 'dist/bundle/cli.js', 'dist/bundle/main.cjs', 'dist/bundle/worker/bootstrap.cjs', 'dist/bundle/worker/hosts.cjs', 'dist/bundle/worker/watchdog-thread.js', 'dist/bundle/worker/index.js', 'dist/bundle/worker/index.cjs'];

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

/**
 * The declarations the package ships, in dist/types/: the files package.json's
 * `types` entries name there, and every declaration they import, copied from
 * tsc's dist/src/ at the same paths. Only these: the rest of dist/src/ (the
 * compiled JavaScript and the other modules' declarations) is for the tests and
 * benches, and nothing in an installed package loads it. Done at every build,
 * before the skip below: a few small files, and a declaration's module may be
 * imported for its types only, which the bundle's inputs do not list.
 */
function copyDeclarations() {
	const TYPES = 'dist/types/';
	const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
	const leaves = value => (typeof value === 'string' ? [value] : Object.values(value ?? {}).flatMap(leaves));
	const entries = [...new Set([...leaves(manifest.exports), manifest.types, ...leaves(manifest.typesVersions)]
		.filter(target => /\.d\.[cm]?ts$/.test(target))
		.map(target => path.posix.normalize(target)))];
	const outside = entries.filter(target => !target.startsWith(TYPES));
	if (entries.length === 0 || outside.length > 0) {
		process.stderr.write(`bundle: package.json's types entries must name declarations under ${TYPES}, which the build fills from dist/src/; ${outside.join(', ') || 'it names none'}\n`);
		process.exit(1);
	}

	const pending = entries.map(target => target.slice(TYPES.length));
	const copied = new Set();
	for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
		if (copied.has(file)) {
			continue;
		}

		const from = path.join(ROOT, 'dist/src', file);
		if (!existsSync(from)) {
			process.stderr.write(`bundle: ${TYPES}${file} is needed by the package's types, but tsc wrote no dist/src/${file}\n`);
			process.exit(1);
		}

		const text = readFileSync(from, 'utf8');
		const to = path.join(ROOT, TYPES, file);
		// Written only when changed: a build with nothing to do leaves the files as they were.
		if (!existsSync(to) || readFileSync(to, 'utf8') !== text) {
			mkdirSync(path.dirname(to), {recursive: true});
			writeFileSync(to, text);
		}

		copied.add(file);
		for (const [, specifier] of text.matchAll(/(?:\bfrom|\bimport\()\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
			pending.push(path.posix.join(path.posix.dirname(file), specifier).replace(/\.js$/, '.d.ts').replace(/\.cjs$/, '.d.cts').replace(/\.mjs$/, '.d.mts'));
		}
	}

	// A declaration no longer needed (its module gone, or no longer imported) must not linger.
	for (const entry of readdirSync(path.join(ROOT, TYPES), {recursive: true, withFileTypes: true})) {
		const file = path.relative(path.join(ROOT, TYPES), path.join(entry.parentPath, entry.name)).split(path.sep).join('/');
		if (entry.isFile() && !copied.has(file)) {
			rmSync(path.join(ROOT, TYPES, file));
		}
	}
}

copyDeclarations();

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
	worker: ['src/worker/index.ts'],
	bootstrap: ['src/worker/bootstrap.ts', 'src/worker/heartbeat.ts'],
};

/**
 * What runs at every start is CommonJS, each entry one file: the CLI
 * (cli.cjs, the package's bin, and main.cjs, which it loads unless it only
 * prints) and the bootstrap preloaded into every worker before the app
 * (worker/bootstrap.cjs, `--require`). Node's ES module loader reads a tree
 * of files asynchronously and links it before running any of it; CommonJS is
 * read and run in one synchronous step. Measured side by side (`node
 * bench/startup.js`, docs/performance.md): the command to both workers
 * listening about 35 ms sooner, 1.28x a hand-written primary's time down to
 * 1.13x. The helper the app imports stays an ES module (worker/index.js, with
 * index.cjs handing it to CommonJS apps); it shares no module with the
 * bootstrap: the two meet on globals (channel.ts, signal-listeners.ts).
 *
 * `import.meta.url` becomes the file's own URL, as in an ES module; cli.cjs
 * and main.cjs sit at one depth, so the files they find by URL are the same.
 * What is loaded lazily (args.ts with yargs, the metrics server, pino-pretty)
 * is inlined behind its `import()`, and runs only when called.
 */
const commonJs = {
	format: 'cjs',
	splitting: false,
	outExtension: {'.js': '.cjs'},
	define: {'import.meta.url': '__selfUrl'},
	banner: {js: '"use strict";\nvar __selfUrl = require("node:url").pathToFileURL(__filename).href;'},
};

/**
 * cli.ts's `import('./main.js')` is main.cjs, the other entry, loaded with
 * `require()`: not inlined into cli.cjs (a plain `--version` does not read it),
 * and not a real `import()`, which would start the ES module loader.
 */
const mainApart = {
	name: 'main-apart',
	setup(build) {
		build.onResolve({filter: /^\.\/main\.js$/}, ({importer}) => (importer.endsWith(path.join('src', 'cli.ts')) ? {path: 'main.cjs', namespace: 'main-apart'} : undefined));
		build.onLoad({filter: /.*/, namespace: 'main-apart'}, () => ({contents: 'module.exports = require("./main.cjs");', loader: 'js'}));
		build.onResolve({filter: /^\.\/main\.cjs$/, namespace: 'main-apart'}, () => ({path: './main.cjs', external: true}));
	},
};

/**
 * The drain's own code (worker/hosts.ts) is a file of its own, worker/hosts.cjs,
 * which the bootstrap and the helper load only when a process first needs a
 * drain (load-hosts.ts): the bootstrap with `require()`, the ES helper with a
 * `require()` made by createRequire. The two then share one instance of it.
 */
const hostsApart = format => ({
	name: 'hosts-apart',
	setup(build) {
		build.onResolve({filter: /^\.\/load-hosts\.js$/}, () => ({path: 'load-hosts', namespace: 'hosts-apart'}));
		build.onLoad({filter: /.*/, namespace: 'hosts-apart'}, () => ({
			contents: format === 'cjs'
				? 'module.exports = {loadHosts: () => require("./hosts.cjs")};'
				: 'import {createRequire} from "node:module";\nexport const loadHosts = () => createRequire(import.meta.url)("./hosts.cjs");',
			loader: 'js',
		}));
		build.onResolve({filter: /^\.\/hosts\.cjs$/, namespace: 'hosts-apart'}, () => ({path: './hosts.cjs', external: true}));
	},
});

const builds = {
	cli: {entryPoints: {cli: 'src/cli.ts', main: 'src/main.ts'}, outdir: OUT, base: 'src', plugins: [mainApart], ...commonJs},
	worker: {
		entryPoints: {index: 'src/worker/index.ts', 'watchdog-thread': 'src/worker/watchdog-thread.ts'},
		outdir: path.join(OUT, 'worker'),
		base: 'src/worker',
		plugins: [hostsApart('esm')],
	},
	bootstrap: {entryPoints: {bootstrap: 'src/worker/bootstrap.ts', hosts: 'src/worker/hosts.ts'}, outdir: path.join(OUT, 'worker'), base: 'src/worker', plugins: [hostsApart('cjs')], ...commonJs},
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

for (const [name, {base, ...options}] of Object.entries(builds)) {
	const {metafile} = await build({...common, ...options});
	const {outdir} = options;
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

// The CLI's path before it became CommonJS, which a Dockerfile, a Kubernetes
// command or a systemd unit may name: it runs cli.cjs (through Node's ES module
// loader first, a few milliseconds more; the bin and our examples name cli.cjs).
// A cli.cjs missing or cut short is an incomplete install, as cli.cjs says of the files it loads.
const {ExitCode} = await import(pathToFileURL(path.join(ROOT, 'dist/src/exit-codes.js')).href);
writeFileSync(path.join(OUT, 'cli.js'), `#!/usr/bin/env node
// The CLI is cli.cjs; this path still runs it, for the commands that name it.
import('./cli.cjs').catch(error => {
	if (error?.code !== 'ERR_MODULE_NOT_FOUND' && !(error instanceof SyntaxError)) {
		throw error;
	}

	process.stderr.write(\`graceful-cluster: its installation is incomplete, so nothing was started: \${String(error)}. Reinstall graceful-cluster with its dependencies (npm ci).\\n\`);
	process.exit(${ExitCode.INCOMPLETE_INSTALL});
});
`, {mode: 0o755});

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

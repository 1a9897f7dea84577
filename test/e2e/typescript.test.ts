// The package's types as a TypeScript app meets them: the packed tarball installed into
// a fresh app, whose ES module and CommonJS files the project's own typescript checks
// (`--noEmit`) under each `module`/`moduleResolution` pair an app may use. Every file
// also holds a misuse marked @ts-expect-error, so types that fell back to `any` fail.
import test from 'ava';
import {execFile} from 'node:child_process';
import {mkdirSync, rmSync, writeFileSync} from 'node:fs';
import path from 'node:path';
import {promisify} from 'node:util';
import {ROOT} from '../helpers/cluster.js';
import {installPacked} from '../helpers/package.js';

const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');

// ES module syntax: an .mts file under node16/nodenext, a .ts file elsewhere.
const esm = `
import {createServer} from 'node:http';
import {attach, type AttachOptions, type GracefulHandle, type PhaseName} from 'graceful-cluster/worker';
import {attach as attachFromRoot} from 'graceful-cluster';

const options: AttachOptions = {readinessChecks: {database: async () => true}};
const handle: GracefulHandle = attach(createServer(), options).onShutdown(async () => {});
export const phase: PhaseName = handle.phase;
export const same: typeof attach = attachFromRoot;
// @ts-expect-error: a readiness check is a function
attach(createServer(), {readinessChecks: {database: 5}});
// @ts-expect-error: a number is not a server
attach(42);
`;

// A TypeScript file compiled to CommonJS, in both of its import forms.
const cts = `
import {createServer} from 'node:http';
import {attach, type AttachOptions, type GracefulHandle} from 'graceful-cluster/worker';
import worker = require('graceful-cluster/worker');

const options: AttachOptions = {readinessChecks: {database: async () => true}};
const handle: GracefulHandle = worker.attach(createServer(), options);
export const draining: boolean = attach(createServer()).onDrain(notice => notice.closeInMs).draining || handle.draining;
// @ts-expect-error: a readiness check is a function
attach(createServer(), {readinessChecks: {database: 5}});
// @ts-expect-error: a number is not a server
worker.attach(42);
`;

// Plain CommonJS JavaScript, checked (checkJs), as an editor checks it.
const cjs = `
// @ts-check
const {createServer} = require('node:http');
const {attach} = require('graceful-cluster/worker');

/** @type {import('graceful-cluster/worker').AttachOptions} */
const options = {readinessChecks: {database: async () => true}};
attach(createServer(), options).onShutdown(async () => {});
// @ts-expect-error: a readiness check is a function
attach(createServer(), {readinessChecks: {database: 5}});
// @ts-expect-error: a number is not a server
attach(42);
`;

interface Setting {
	readonly module: string;
	readonly moduleResolution: string;
	readonly files: Record<string, string>;
	/** `tsc --init`'s choice for CommonJS; the node16 modes and bundler imply it. */
	readonly esModuleInterop?: boolean;
	/** The type errors the check must give, each `file(line,column): error TSnnnn`, all of them; none when absent. */
	readonly errors?: readonly string[];
}

// A misuse without @ts-expect-error, which must fail the check where it is: the
// declarations are not `any` in a project that type-checks them strictly.
const misuse = `
import {createServer} from 'node:http';
import {attach} from 'graceful-cluster/worker';

attach(createServer());
attach(42);
`;

const settings: Setting[] = [
	{module: 'commonjs', moduleResolution: 'node10', esModuleInterop: true, files: {'app.ts': esm, 'app-cjs.cts': cts, 'app-js.cjs': cjs}},
	// An older CommonJS project: no default imports of CommonJS modules (TS1192 in a
	// declaration that has one, which only skipLibCheck would hide, with its types as any).
	{module: 'commonjs', moduleResolution: 'node10', esModuleInterop: false, files: {'app.ts': esm, 'app-cjs.cts': cts, 'app-js.cjs': cjs, 'misuse.ts': misuse}, errors: ['misuse.ts(6,8): error TS2345']},
	{module: 'node16', moduleResolution: 'node16', files: {'app.mts': esm, 'app-cjs.cts': cts, 'app-js.cjs': cjs}},
	{module: 'nodenext', moduleResolution: 'nodenext', files: {'app.mts': esm, 'app-cjs.cts': cts, 'app-js.cjs': cjs}},
	{module: 'esnext', moduleResolution: 'bundler', files: {'app.ts': esm, 'app-js.cjs': cjs}},
];

let app = '';

test.before(() => {
	({dir: app} = installPacked('gc-ts-app-'));
});

test.after.always(() => {
	if (app !== '') {
		rmSync(app, {recursive: true, force: true});
	}
});

// Serial: each run is a few seconds of one core, and this machine has two.
for (const setting of settings) {
	const interop = setting.esModuleInterop === undefined ? '' : setting.esModuleInterop ? ' and esModuleInterop' : ' without esModuleInterop';
	const name = `${setting.module}-${setting.moduleResolution}${setting.esModuleInterop === false ? '-no-interop' : ''}`;
	const verdict = setting.errors ? `fails only on ${setting.errors.join(', ')}` : 'type-checks';
	test.serial(`types: module ${setting.module} with moduleResolution ${setting.moduleResolution}${interop}, not skipping lib checks, ${verdict} in ${Object.keys(setting.files).join(', ')}`, async t => {
		const dir = path.join(app, name);
		mkdirSync(dir);
		for (const [file, text] of Object.entries(setting.files)) {
			writeFileSync(path.join(dir, file), text);
		}
		writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
			compilerOptions: {
				module: setting.module,
				moduleResolution: setting.moduleResolution,
				...(setting.esModuleInterop === undefined ? {} : {esModuleInterop: setting.esModuleInterop}),
				target: 'ES2022',
				strict: true,
				noEmit: true,
				allowJs: true,
				checkJs: true,
				// Our declaration files are checked too, not skipped.
				skipLibCheck: false,
				// The app would install @types/node; the project's copy will do.
				types: ['node'],
				typeRoots: [path.join(ROOT, 'node_modules/@types')],
			},
			files: Object.keys(setting.files),
		}, undefined, '\t'));
		const result = await promisify(execFile)(process.execPath, [TSC, '-p', 'tsconfig.json'], {cwd: dir, encoding: 'utf8'})
			.then(({stdout}) => ({code: 0, stdout}), (error: Error & {code?: number; stdout?: string}) => ({code: error.code, stdout: error.stdout ?? String(error)}));
		const errors = result.stdout.split('\n').filter(line => /error TS\d+/.test(line)).map(line => /^(.*?: error TS\d+)/.exec(line)![1]);
		t.deepEqual(errors, setting.errors ?? [], result.stdout);
		if (setting.errors) {
			t.not(result.code, 0);
		} else {
			t.is(result.stdout, '', result.stdout);
			t.is(result.code, 0);
		}
	});
}

// `npm run example` (after the build): the example app, examples/hello/server.js,
// under graceful-cluster with 2 workers. npm puts what follows `npm run example --`
// at the end of the command, after the app's path, where graceful-cluster hands it
// to the app: here it goes before the app's path, as graceful-cluster's options,
// so `npm run example -- --reject-period 2s` sets the reject period. What follows
// a `--` among them goes to the app. The command is said on stderr first.
//
// The CLI runs in this process (the bundle's cli.cjs, with the command line set
// as it reads it): no process in between to hand signals on, so Ctrl-C and a
// SIGTERM to this process's pid are the primary's, as with the CLI itself.
import {createRequire} from 'node:module';
import path from 'node:path';
import process from 'node:process';

const APP = 'examples/hello/server.js';
const CLI = path.resolve(import.meta.dirname, '../dist/bundle/cli.cjs');

const given = process.argv.slice(2);
const end = given.indexOf('--');
const own = end === -1 ? given : given.slice(0, end);
const appArgs = end === -1 ? [] : given.slice(end + 1);
const args = ['--workers', '2', ...own, APP, ...appArgs];

const quote = arg => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll('\'', '\'\\\'\'')}'`);
process.stderr.write(`example: graceful-cluster ${args.map(quote).join(' ')}\n`);

process.argv = [process.argv[0], CLI, ...args];
createRequire(import.meta.url)(CLI);

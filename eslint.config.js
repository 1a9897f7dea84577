// `npm run lint` (part of `npm test`). TypeScript is linted with its types (one
// program, from tsconfig.json, as tsc builds it); the JavaScript here (bench/,
// scripts/, examples/, test/fixtures/: apps and tools that run as they are, no
// tsc behind them) without, as JavaScript, with Node's globals.
import js from '@eslint/js';
import {defineConfig} from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
	{
		// Build output and the bench's cache (node_modules/, the bench's too, ESLint skips by itself).
		ignores: ['dist/', '.bench-cache/'],
	},
	{
		linterOptions: {
			// A disable comment that silences nothing fails the lint: none outlives its reason.
			reportUnusedDisableDirectives: 'error',
			reportUnusedInlineConfigs: 'error',
		},
	},
	js.configs.recommended,
	tseslint.configs.recommendedTypeChecked,
	{
		languageOptions: {
			parserOptions: {
				projectService: true,
				tsconfigRootDir: import.meta.dirname,
			},
		},
	},
	{
		files: ['**/*.{js,mjs,cjs}'],
		extends: [tseslint.configs.disableTypeChecked],
		languageOptions: {globals: globals.node},
	},
	{
		files: ['**/*.{cjs,cts}'],
		rules: {
			// CommonJS: require() is how these load a module.
			'@typescript-eslint/no-require-imports': 'off',
		},
	},
	{
		rules: {
			// A serial await in the product is a decision (one worker at a time, hooks
			// in order): each says so at its disable comment. Tests, the test kit,
			// the bench and scripts are sequences of steps, polls and waits almost
			// everywhere they loop; there the rule is off (see below).
			'no-await-in-loop': 'error',
			// A patched method forwards `arguments` as the caller gave them.
			'prefer-rest-params': 'error',
			'no-new': 'error',
			// `catch {}` is how a best-effort step (a kill, an unlink, a close) ignores its failure.
			'no-empty': ['error', {allowEmptyCatch: true}],
			// `_name`: a parameter a signature needs, or a property destructured away.
			'@typescript-eslint/no-unused-vars': ['error', {argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true}],

			// Off: rules that fight a pattern this code uses on purpose, in many places.
			// V8 names a function expression after the property it is assigned to
			// (`server.emit = function (...)` shows as `server.emit` in a stack), which
			// is all func-names would buy; the patched methods are written that way.
			'func-names': 'off',
			// Methods are declared as methods in interfaces and handed around as
			// closures (`has: app.has`, `{release}`), and a patched method's original
			// is kept to be called with Reflect.apply(original, this, ...): the rule
			// cannot tell either from a lost `this`.
			'@typescript-eslint/unbound-method': 'off',
			// A patched method is a `function`, to get the patched object as `this`;
			// the patcher's own `this` reaches it by a name (`const filter = this`).
			'@typescript-eslint/no-this-alias': 'off',
			// Besides casts that are dead, it reports casts tsc needs (one that adds
			// optional properties, or widens an inferred one: its --fix then breaks the
			// build) and asks for `Reflect.apply(...) as T` in type arguments instead.
			'@typescript-eslint/no-unnecessary-type-assertion': 'off',
			// An async function without await is how an implementation of a
			// promise-returning interface (a hook, a fake in a test) answers, a throw
			// becoming a rejection.
			'@typescript-eslint/require-await': 'off',
		},
	},
	{
		files: ['test/**', 'testkit/**', 'bench/**', 'scripts/**'],
		rules: {
			// One request, poll or wait after another is what these are made of.
			'no-await-in-loop': 'off',
		},
	},
	{
		files: ['test/**'],
		rules: {
			// Tests read parsed JSON and YAML (manifests, /status, log lines) field by
			// field, and their assertions are what checks the shape.
			'@typescript-eslint/no-unsafe-argument': 'off',
			'@typescript-eslint/no-unsafe-assignment': 'off',
			'@typescript-eslint/no-unsafe-call': 'off',
			'@typescript-eslint/no-unsafe-member-access': 'off',
			'@typescript-eslint/no-unsafe-return': 'off',
		},
	},
);

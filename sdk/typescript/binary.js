// Where the rewindfs binary of this install is: the per-platform package npm installed as an
// optional dependency (rewindfs-linux-x64, a static binary), as the Claude Agent SDK brings the
// Claude Code CLI. No runtime dependencies.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** The per-platform packages, by `${process.platform} ${process.arch}`. */
const PACKAGES = { "linux x64": "rewindfs-linux-x64" };

/** The path of the rewindfs binary that came with this package. Throws, saying what to do,
 * when there is none for this platform or npm left the optional dependency out. */
export function binaryPath() {
  const platform = `${process.platform} ${process.arch}`;
  const pkg = PACKAGES[platform];
  if (!pkg) {
    throw new Error(
      `rewindfs has no prebuilt binary for ${platform} (there is one for: ${Object.keys(PACKAGES).join(", ")}); ` +
        "build it from the repository: cargo install --locked --git <repository> rewindfs",
    );
  }
  try {
    return require.resolve(`${pkg}/rewindfs`);
  } catch {
    throw new Error(
      `the rewindfs binary package ${pkg} is not installed: npm installs it as an optional dependency ` +
        `of rewindfs, unless optional dependencies are left out (--omit=optional, --no-optional); ` +
        `install it: npm install ${pkg}`,
    );
  }
}

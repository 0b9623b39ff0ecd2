# hpcenv step library. A manifest has one line per file, "SIZE  SHA256  RELATIVE-PATH"
# (sha256sum-compatible after the size column), sorted by the path's bytes (LC_ALL=C), without
# the manifest itself. Datasets hold regular files and folders only: symbolic links, special
# files and names with a newline or a backslash are refused, here and in hpcenv/jobs/staging.py
# alike. Results are published under a lock beside the destination, from a mktemp name.
# Other users share the node and the file systems: a folder hpcenv makes for a job is made by
# mkdir (failing if it exists), 0700, in a per-user folder that must be ours and that nobody else
# can write, and every folder above it must be root's or ours and not writable by others unless
# sticky (like /tmp); a lock file is made with noclobber (O_EXCL), never through a symlink, and
# must be ours. Each refusal is one line naming the path and its owner.
# A job writes this library once into its steps folder (lib.sh, its code only: render.step_file)
# and the steps that use it source it; a step rendered standalone carries a copy of its own.
hpcenv_die() { echo "$2" >&2; exit "$1"; }  # STATUS MESSAGE: say why on stderr, exit the step
hpcenv_unsafe_parents() {  # PATH: print why a folder above PATH lets another user move it
  local dir uid mode me
  me=$(id -u) dir=$(dirname -- "$1")
  while :; do
    if [ -e "$dir" ]; then
      read -r uid mode < <(stat -L -c '%u %a' -- "$dir")
      if [ "$uid" != 0 ] && [ "$uid" != "$me" ]; then
        echo "$dir belongs to $(stat -L -c %U -- "$dir")"
        return
      elif ((8#$mode & 8#022)) && ! ((8#$mode & 8#1000)); then
        echo "$dir is writable by other users (mode $mode, not sticky)"
        return
      fi
    fi
    [ "$dir" != / ] && [ "$dir" != . ] || return 0
    dir=$(dirname -- "$dir")
  done
}
hpcenv_check_ours() {  # DIR WHAT: refuse unless DIR is a real folder of ours nobody else can write
  local dir=$1 what=$2 mode why=
  if [ -L "$dir" ] || [ ! -d "$dir" ]; then
    why="is not a folder (a link or a file)"
  elif [ "$(stat -c %u -- "$dir")" != "$(id -u)" ]; then
    why="belongs to $(stat -c %U -- "$dir"), not to $(id -un)"
  elif mode=$(stat -c %a -- "$dir") && ((8#$mode & 8#022)); then
    why="is writable by other users (mode $mode)"
  else
    why=$(hpcenv_unsafe_parents "$dir")
    why=${why:+"is not safe from other users: $why"}
  fi
  [ -z "$why" ] || { echo "hpcenv: $what $dir $why; refusing to use it" >&2; return 1; }
}
hpcenv_user_dir() {  # DIR: make the per-user DIR (0700) if absent; it must be ours
  local dir=$1 why
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    # A root above it that nobody made yet (/tmp/hpcenv-local) becomes ours: other users are
    # then refused under it (its owner could move their folders), so sites name $USER.
    mkdir -p -- "$(dirname -- "$dir")" 2>/dev/null || true
    mkdir -m 0700 -- "$dir" 2>/dev/null || true # may lose a race: the checks decide
    if [ ! -e "$dir" ]; then
      why=$(hpcenv_unsafe_parents "$dir")
      echo "hpcenv: cannot make per-user folder $dir (${why:-no permission}); refusing to run" >&2
      return 1
    fi
  fi
  hpcenv_check_ours "$dir" "per-user folder"
}
hpcenv_job_dir() {  # DIR: make this job's DIR (0700) in its per-user folder; fail if it exists
  local dir=$1 up why
  up=$(dirname -- "$dir")
  if [ -k "$up" ] && [ "$(stat -L -c %u -- "$up")" = 0 ]; then
    # A shared sticky folder of root's (/tmp, /dev/shm): DIR's name is unguessable (job.sh),
    # nobody else can remove or rename it there; only the folders above must be safe.
    why=$(hpcenv_unsafe_parents "$dir")
    [ -z "$why" ] ||
      { echo "hpcenv: job folder $dir is not safe from other users: $why; refusing to use it" >&2; return 1; }
  else
    hpcenv_user_dir "$up" || return 1
  fi
  # A requeued job has the same id: its own folder from the first run is reused; any other
  # (another user's, a link) is refused by the check.
  mkdir -m 0700 -- "$dir" 2>/dev/null && return
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    echo "hpcenv: cannot make job folder $dir" >&2
  elif hpcenv_check_ours "$dir" "job folder" && ! ((8#$(stat -c %a -- "$dir") & 8#077)); then
    echo "hpcenv: job folder $dir is ours from an earlier run of this job; reusing it"
    return 0
  else
    echo "hpcenv: job folder $dir already exists (owner $(stat -c %U -- "$dir")); refusing to use it" >&2
  fi
  return 1
}
hpcenv_lock() {  # FD PATH: open PATH as a lock on FD and take it; never through a symlink
  local fd=$1 path=$2 why=
  # A planted FIFO or device would block or act on open, even with noclobber: never opened, and
  # neither is a planted link; both are refused below.
  if [ ! -L "$path" ] && { [ ! -e "$path" ] || [ -f "$path" ]; }; then
    (set -C && : >"$path") 2>/dev/null || true # O_CREAT|O_EXCL: a planted symlink is not followed
  fi
  if [ -L "$path" ] || [ ! -f "$path" ]; then
    why="is a link or not a file (planted by $(stat -c %U -- "$path"))"
  elif [ "$(stat -c %u -- "$path")" != "$(id -u)" ]; then
    why="belongs to $(stat -c %U -- "$path"), not to $(id -un)"
  else
    eval "exec $fd<\"\$path\"" # read-only: opening never truncates or creates
    [ "$(stat -L -c '%d:%i:%u' -- "/proc/self/fd/$fd")" = "$(stat -c '%d:%i:%u' -- "$path")" ] ||
      why="changed while it was opened"
  fi
  [ -z "$why" ] || { echo "hpcenv: lock $path $why; refusing it" >&2; return 1; }
  flock "$fd"
}
hpcenv_check_tree() {  # DIR: fail on links, special files and names a manifest cannot hold
  local dir=$1 f bad=0
  while IFS= read -r -d '' f; do
    echo "manifest: $dir/$f is a link or special file; datasets hold regular files only" >&2; bad=1
  done < <(cd "$dir" && find . -mindepth 1 ! -type f ! -type d -printf '%P\0')
  while IFS= read -r -d '' f; do
    echo "manifest: file name not allowed in a manifest: $(printf '%q' "$f")" >&2; bad=1
  done < <(cd "$dir" && find . -mindepth 1 \( -name $'*\n*' -o -name '*\\*' \) -printf '%P\0')
  return "$bad"
}
hpcenv_manifest() {  # DIR: print the manifest of DIR
  local dir=$1 f
  hpcenv_check_tree "$dir" || return 1
  (cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\0' | LC_ALL=C sort -z |
    while IFS= read -r -d '' f; do
      printf '%s  %s  %s\n' "$(stat -c %s -- "$f")" "$(sha256sum -- "$f" | cut -d' ' -f1)" "$f"
    done)
}
hpcenv_verify() {  # DIR MANIFEST: exactly the listed files; sizes first (cheap), then sha256
  local dir=$1 manifest=$2 line size rest digest path actual why extra bad=0 listed=""
  hpcenv_check_tree "$dir" || return 1
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] || continue
    size=${line%%  *} rest=${line#*  } digest=${rest%%  *} path=${rest#*  } why=
    if ! [[ $size =~ ^[0-9]+$ && $digest =~ ^[0-9a-f]{64}$ ]] || [ "$path" = "$rest" ]; then
      why="malformed line in $manifest: $(printf '%q' "$line")"
    elif [[ /$path/ == //* || /$path/ == */../* || /$path/ == */./* || /$path/ == *//* ]]; then
      why="$(printf '%q' "$path") in $manifest leaves $dir; refused"
    else
      listed+=$path$'\n'
      if [ ! -f "$dir/$path" ]; then
        why="missing $dir/$path"
      elif actual=$(stat -c %s -- "$dir/$path") && [ "$actual" != "$size" ]; then
        why="size of $dir/$path is $actual, manifest says $size"
      fi
    fi
    [ -z "$why" ] || { echo "verify: $why" >&2; bad=1; }
  done <"$manifest"
  while IFS= read -r extra; do
    [ -z "$extra" ] || { echo "verify: $dir/$extra is not in the manifest" >&2; bad=1; }
  done < <(LC_ALL=C comm -13 <(printf '%s' "$listed" | LC_ALL=C sort) \
    <(cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\n' | LC_ALL=C sort))
  [ "$bad" -eq 0 ] || return 1
  [ -s "$manifest" ] || return 0  # no files: nothing to checksum (sha256sum -c refuses empty input)
  sed -E 's/^[0-9]+  //' "$manifest" | (cd "$dir" && sha256sum --quiet --strict -c -) ||
    { echo "verify: checksum mismatch in $dir against $manifest" >&2; return 1; }
}
hpcenv_identity() {  # PATH: what PATH is now: "absent", or its device:inode and change time
  if [ -e "$1" ] || [ -L "$1" ]; then stat -c '%d:%i:%z' -- "$1"; else echo absent; fi
}
hpcenv_mode_like_umask() {  # PATH: the mode a new file gets (mktemp makes 0600/0700)
  local base=0666
  [ -d "$1" ] && base=0777
  chmod "$(printf '%04o' $((base & ~0$(umask))))" -- "$1"
}
hpcenv_publish() {  # TMP DEST FORCE SEEN: rename TMP to DEST under DEST's lock
  # SEEN is hpcenv_identity DEST from when the step began: if DEST changed since (another job
  # published there), nothing is replaced. An existing DEST is replaced only with FORCE=1.
  # Exit 3 when refused; the caller removes TMP.
  local tmp=$1 dest=$2 force=$3 seen=$4 old why=
  hpcenv_lock 9 "$dest.hpcenv-lock" || return 3
  if [ "$(hpcenv_identity "$dest")" != "$seen" ]; then
    why="changed while this step ran (another job wrote it); not overwriting"
  elif [ "$seen" = absent ]; then
    mv -n -T -- "$tmp" "$dest" # rename(2) with RENAME_NOREPLACE: never overwrites
    [ ! -e "$tmp" ] || why="appeared meanwhile; not overwriting"
  elif [ "$force" != 1 ]; then
    why="already exists; not overwriting (use --force)"
  elif [ -d "$dest" ] && [ ! -L "$dest" ]; then
    old=$(mktemp -d -- "$dest.hpcenv-old.XXXXXX")
    mv -T -- "$dest" "$old"
    mv -T -- "$tmp" "$dest" || { mv -T -- "$old" "$dest"; return 1; }
    rm -rf -- "$old"
  else
    mv -f -T -- "$tmp" "$dest" # one rename replaces a file atomically
  fi
  [ -z "$why" ] || { echo "publish: $dest $why" >&2; return 3; }
  exec 9>&-
}

# frozen_string_literal: true

require 'etc'

class SessiondStore
  # Where the daemon's socket is when nobody says: the choice sessiond makes
  # itself (internal/layout/defaults.go DefaultSocket), in the same order and
  # with the same corner cases (a relative SESSIOND_STATE_DIR or HOME skips
  # the state folder, a relative XDG_* value is ignored, the length limit
  # counts bytes). Client and daemon agree on it without talking.
  module Layout
    SOCKET_NAME = 'sessiond.sock'

    # Raised inside default_state_dir where the Go side returns an error.
    class NoFolder < StandardError; end

    module_function

    def linux?(platform)
      platform.include?('linux')
    end

    def darwin?(platform)
      platform.include?('darwin')
    end

    # The longest socket path the kernel takes (sun_path less its NUL).
    def max_socket_path(platform = RUBY_PLATFORM)
      darwin?(platform) ? 103 : 107
    end

    # Go's filepath.Clean, for the absolute paths used here.
    def clean(path)
      parts = []
      path.split('/').each do |part|
        next if part.empty? || part == '.'

        if part == '..'
          parts.pop
        else
          parts << part
        end
      end
      "/#{parts.join('/')}"
    end

    def absolute?(value)
      value.start_with?('/')
    end

    def utf8?(value)
      value.dup.force_encoding(Encoding::UTF_8).valid_encoding?
    end

    def env_folder(getenv, name)
      value = getenv.call(name).to_s
      return nil if value.empty?
      raise NoFolder, name unless utf8?(value) && absolute?(value)

      clean(value)
    end

    def passwd_home
      home = Etc.getpwuid(Process.uid)&.dir
      raise NoFolder, 'no home in the user database' if home.nil? || !absolute?(home)

      clean(home)
    rescue ArgumentError
      raise NoFolder, 'no entry in the user database'
    end

    # $SESSIOND_STATE_DIR (absolute), else $XDG_STATE_HOME/sessiond (when
    # absolute), else $HOME/.local/state/sessiond with HOME from the user
    # database when unset.
    def default_state_dir(getenv, home = method(:passwd_home))
      value = env_folder(getenv, 'SESSIOND_STATE_DIR')
      return value if value

      xdg = getenv.call('XDG_STATE_HOME').to_s
      return clean("#{xdg}/sessiond") if absolute?(xdg)

      h = env_folder(getenv, 'HOME') || home.call
      clean("#{h}/.local/state/sessiond")
    end

    # A real folder (not a symlink) owned by uid that nobody else may enter.
    def private_folder?(path, uid)
      st = File.lstat(path)
      st.directory? && (st.mode & 0o077).zero? && st.uid == uid
    rescue SystemCallError
      false
    end

    # The socket sessiond listens on by default, the first of:
    #  1. $SESSIOND_SOCKET as given;
    #  2. $XDG_RUNTIME_DIR/sessiond/sessiond.sock when XDG_RUNTIME_DIR is absolute;
    #  3. on Linux, /run/user/<uid>/sessiond/sessiond.sock when /run/user/<uid>
    #     is a private folder of the user;
    #  4. on macOS, $TMPDIR/sessiond/sessiond.sock when absolute and short enough;
    #  5. <state folder>/run/sessiond.sock when short enough;
    #  6. /tmp/sessiond-<uid>/sessiond.sock.
    # The keyword arguments are for tests.
    def default_socket(env: ENV, uid: Process.uid, platform: RUBY_PLATFORM,
                       home: method(:passwd_home), private: method(:private_folder?))
      getenv = ->(name) { env[name] }
      limit = max_socket_path(platform)

      given = getenv.call('SESSIOND_SOCKET').to_s
      return given unless given.empty?

      runtime = getenv.call('XDG_RUNTIME_DIR').to_s
      return clean("#{runtime}/sessiond/#{SOCKET_NAME}") if absolute?(runtime)

      if linux?(platform)
        folder = "/run/user/#{uid}"
        return clean("#{folder}/sessiond/#{SOCKET_NAME}") if private.call(folder, uid)
      elsif darwin?(platform)
        tmp = getenv.call('TMPDIR').to_s
        if absolute?(tmp)
          path = clean("#{tmp}/sessiond/#{SOCKET_NAME}")
          return path if path.bytesize <= limit
        end
      end
      begin
        state = default_state_dir(getenv, home)
      rescue NoFolder
        state = nil
      end
      if state
        path = clean("#{state}/run/#{SOCKET_NAME}")
        return path if path.bytesize <= limit
      end
      "/tmp/sessiond-#{uid}/#{SOCKET_NAME}"
    end
  end

  # The socket sessiond listens on by default (see Layout.default_socket).
  def self.default_socket
    Layout.default_socket
  end
end

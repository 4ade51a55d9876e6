# frozen_string_literal: true

require 'socket'

class SessiondStore
  # The store talks only to the user's own daemon.
  #
  # A transcript holds code, prompts and often secrets. The last default
  # socket (/tmp/sessiond-<uid>/) sits in a folder any local user can create
  # first, and a socket path can be pointed anywhere by a symlink, so before
  # gRPC sends a byte two things are checked:
  #
  # (a) the socket's folder is a real folder (lstat: a symlink is refused),
  #     owned by us or root, that nobody else may write to;
  # (b) the process serving the socket runs as us or root, as the kernel
  #     reports it for a connection of our own (SO_PEERCRED on Linux,
  #     getpeereid(3) on macOS and the BSDs), which sends nothing and is
  #     closed.
  #
  # (b) alone would not do: gRPC opens its own connection after the probe
  # (and again on every reconnect), and someone could swap the socket in
  # between. (a) closes that gap: in a folder only we or root can write,
  # nobody else can remove, rename or plant a socket.
  module Trust
    module_function

    def socket_folder(path)
      folder = File.dirname(path)
      folder.empty? ? '.' : folder
    end

    # The folder's owner and, when it is a symlink, its target.
    def folder_facts(folder)
      st = File.lstat(folder)
      link = nil
      if st.symlink?
        link = begin
          File.readlink(folder)
        rescue SystemCallError
          '?'
        end
      end
      [st.uid, link]
    rescue SystemCallError
      [nil, nil]
    end

    # Check (a). Raises UntrustedSocketError when the folder fails it,
    # SessiondUnavailableError when it does not exist (nothing to distrust:
    # no sessiond there).
    def check_folder(path, own_uid = Process.euid)
      folder = socket_folder(path)
      begin
        st = File.lstat(folder)
      rescue Errno::ENOENT
        raise SessiondUnavailableError.new(
          "no sessiond socket at #{path}: its folder #{folder} does not exist; start sessiond " \
          '(or point SESSIOND_SOCKET at the socket it serves)'
        )
      rescue SystemCallError => e
        raise SessiondUnavailableError.new("cannot check the socket folder #{folder}: #{e.message}")
      end
      uid, link = folder_facts(folder)
      problem =
        if st.symlink?
          "its folder #{folder} is a symlink (to #{link})"
        elsif !st.directory?
          "#{folder} is not a folder"
        elsif ![own_uid, 0].include?(st.uid)
          "its folder #{folder} belongs to uid #{st.uid}"
        elsif (st.mode & 0o022) != 0
          format('its folder %<folder>s may be written by others (mode %<mode>#o)', folder: folder, mode: st.mode & 0o7777)
        end
      return if problem.nil?

      raise UntrustedSocketError.new(socket: path, folder: folder, own_uid: own_uid, problem: problem,
                                     folder_uid: uid, folder_link: link)
    end

    # [pid, uid] of the process serving the connected socket; pid is nil
    # where only the uid can be known, and the whole answer nil where the
    # platform offers no way to ask.
    def peer_credentials(sock)
      if RUBY_PLATFORM.include?('linux') && Socket.const_defined?(:SO_PEERCRED)
        # struct ucred { pid_t pid; uid_t uid; gid_t gid; }
        pid, uid, _gid = sock.getsockopt(Socket::SOL_SOCKET, Socket::SO_PEERCRED).data.unpack('i!I!I!')
        return [pid, uid]
      end
      return [nil, sock.getpeereid[0]] if sock.respond_to?(:getpeereid)

      nil
    rescue NotImplementedError
      nil
    end

    # Check (b) alone: connect, ask the kernel who serves the socket, close
    # without sending anything. Safe on its own only for a socket in a
    # folder that passed (a).
    def check_peer(path, own_uid = Process.euid, probe_timeout: 5.0)
      creds = probe(path, probe_timeout)
      return if creds.nil? # no way to name the peer here: (a) decided

      pid, uid = creds
      return if [own_uid, 0].include?(uid)

      folder = socket_folder(path)
      folder_uid, link = folder_facts(folder)
      raise UntrustedSocketError.new(socket: path, folder: folder, own_uid: own_uid, server_uid: uid,
                                     server_pid: pid, folder_uid: folder_uid, folder_link: link)
    end

    def probe(path, timeout)
      sock = Socket.new(:UNIX, :STREAM)
      begin
        begin
          sock.connect_nonblock(Socket.sockaddr_un(path))
        rescue IO::WaitWritable
          raise Errno::ETIMEDOUT unless sock.wait_writable(timeout)

          begin
            sock.connect_nonblock(Socket.sockaddr_un(path))
          rescue Errno::EISCONN
            nil
          end
        end
      rescue Errno::ENOENT
        raise SessiondUnavailableError.new(
          "no sessiond socket at #{path}: start sessiond (or point SESSIOND_SOCKET at the socket it serves)"
        )
      rescue Errno::ECONNREFUSED
        raise SessiondUnavailableError.new(
          "nothing listens on #{path}: sessiond is not running (a stale socket file was left behind); start it"
        )
      rescue Errno::ENOTSOCK
        raise SessiondUnavailableError.new("#{path} is not a socket")
      rescue ArgumentError
        raise SessiondUnavailableError.new("#{path} is too long for a socket path")
      rescue SystemCallError => e
        raise SessiondUnavailableError.new("cannot connect to #{path}: #{e.message}")
      end
      peer_credentials(sock)
    ensure
      sock&.close
    end

    # Check (a), then (b); return when both pass. Raises
    # UntrustedSocketError (never worth retrying) or SessiondUnavailableError
    # (no daemon there now; a retry may succeed).
    def verify(path, probe_timeout: 5.0)
      own = Process.euid
      check_folder(path, own)
      check_peer(path, own, probe_timeout: probe_timeout)
    end
  end
end

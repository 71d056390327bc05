"""edgesmith.devices"""
